"""Training the student on the teacher's score-label distribution only: losses, the trainer, and evaluation."""
