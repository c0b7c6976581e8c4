"""Pairs to label: BM25 pooling over a corpus, the synthetic UGC set, and the student's training datasets."""
