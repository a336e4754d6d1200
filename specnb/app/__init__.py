"""What a person touches, by concept: charts (``charts/``), the notebooks' text (``text/``), sliders
(``widgets``) and how charts render (``render``), what a notebook saves (``recorder``), the papermill
runner that renders notebooks as offline HTML (``runner``, ``execution``, ``parameters``), and the
``specnb`` command line (``cli``, ``commands``, ``defaults``)."""
