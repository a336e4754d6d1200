"""The text a notebook shows, written once in the package: conclusions of the measuring notebooks
(``conclusions``), one-sentence reasons why a candidate won or lost (``reasons``), the decision
framework's verdicts (``verdicts``), and which engine to use instead of speculating
(``engine_choice``)."""
