"""Building drafts from the embedded verifier: the distillation corpus (the verifier's own answers
and teacher-forced docs text), the training instructions, and the distillation itself."""
