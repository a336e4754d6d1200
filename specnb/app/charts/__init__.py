"""Altair charts, titled, every axis labelled with its unit: what theory and forward costs lead one
to expect (``expected``), what the interleaved runs measured (``measured``), what the predictor
says (``predicted``), and the options besides speculation (``engine_options``). How charts are rendered
(SVG for shared HTML, inline JavaScript in JupyterLab) is ``specnb.app.render``'s business."""

from specnb.app.charts import style as style  # registers and enables the theme every chart shares
