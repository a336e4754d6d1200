"""Prediction: acceptance traces and their replay, the cost model and hardware profile, the
simulation that turns them into a verdict (``predict``), calibration on the target device, and
validation against measurement; the reference MPS run replayed as a profile."""
