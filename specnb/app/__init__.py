"""What a person touches: the notebooks' charts, sliders and text, the papermill runner that
renders them as offline HTML, and the ``specnb`` command line."""
