"""The KV-cached decoding loop: verifier-only and speculative (``generate``, asked through one
``Decoding`` record: ``settings``), the ``Drafter`` seam every kind of draft plugs into (``drafters``),
the draft kinds in one table (``kinds/``), loading a verifier and its drafts (``pairs``), γ settled in
one place (``gamma``), KV caches with ragged rollback (``kvcache``), the accept/reject rule (``accept``)
and the per-stage timer (``timing``). Nothing here knows a serving engine."""
