"""Getting models into memory: names (``registry``), the embedded verifier and committed drafts
(``embedded``, ``cache``), loading pairs (``load``), and what a draft is made of — early exits,
trimmed output heads, prompt lookup; ``training`` builds the distilled drafts."""
