"""Training the teacher judge: the supervised cold start, GRPO with the judges' rewards, and the traces both learn from."""
