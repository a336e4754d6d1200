"""The text a notebook shows, written once in the package: one module per notebook (``nb01_theory``,
``nb02_dispatch``, ``nb03_gamma``, ``nb04_draft_size``, ``nb05_batch``, ``nb06_decision``,
``nb07_alternatives``, ``nb08_serving``), what several of them share (``common``) and the ``Report``
each returns (``cell_report``). The rules the sentences state (which engine wins, why a draft won or
lost, the predictor's pick) live in ``specnb.predict``; the text words them."""
