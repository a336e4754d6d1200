"""An OpenAI-compatible server someone else runs (SGLang and the like), measured at ``-p endpoint``
(``engine_openai``)."""
