"""detcal: object-detection calibration benchmark."""
__version__ = "0.1.0"
