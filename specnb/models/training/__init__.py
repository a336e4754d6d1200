"""Building drafts from the embedded verifier: the distillation corpus (the verifier's own answers
and teacher-forced docs text), the training instructions, and the distillation itself; and the
feature corpus (``head_corpus``), losses (``head_losses``) and training (``train_heads``) of its
EAGLE draft and Medusa heads."""
