"""The serving engines, one module each (``engine_*.py``), in one table (``seam.ENGINES``;
CONTRIBUTING.md shows how to add one). ``seam.engines()`` registers the built-in ones on first use,
so a launch configuration's module can import the ``Speculation`` record without a cycle."""
