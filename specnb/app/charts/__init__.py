"""Altair charts, titled, every axis labelled with its unit: what theory and forward costs lead one
to expect (``expected``), what the interleaved runs measured (``measured``), what the predictor
says (``predicted``), the options besides speculation (``engine_options``) and speculation under
serving load (``load_curves``). What they share, one colour per draft across a run among it, is
``style``; ``lint`` reads a chart's spec back and says what would mislead (tests hold every chart to
it). How charts are rendered (SVG for shared HTML, inline JavaScript in JupyterLab) is
``specnb.app.render``'s business."""

from specnb.app.charts import style as style  # registers and enables the theme every chart shares
