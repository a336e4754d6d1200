"""The serving engines, one module each (``engine_*.py``), in one table (``engine.ENGINES``;
CONTRIBUTING.md shows how to add one). ``engine.engines()`` registers the built-in ones on first use,
so a launch configuration's module can import the ``Speculation`` record without a cycle."""
