"""Calibrating a device preset from a real block device (`iosched calibrate`), then holding the simulator against
the kernel on that device (`iosched validate`).

Calibration runs a fixed measurement plan (plan.PLAN) through the kernel backend with the `none` scheduler, then
fits the device model's main parameters one by one, each to one measurement, by simulating the measurement with the
candidate preset and correcting the parameter multiplicatively until the simulated figure matches (fit.FITS). The
parameters that no measurement pins are named assumptions of a generic NVMe-like device (fit.BASE_DEVICE). The
method and its limits are in docs/calibration.md.

Modules: plan (the measurement steps), measure (a step on the kernel and in the simulator), fit (the device and
host fits with their provenance), presetfiles (writing presets; presets given as files), comparison (validation's
rows, criteria and tables), calibrate and validate (the two commands).
"""
