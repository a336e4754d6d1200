"""The decoding engine: the KV-cached verifier-only and speculative loops (``generate``), the
``Drafter`` seam every kind of draft plugs into, KV caches with ragged rollback, the accept/reject
rule, and the per-stage timer."""
