"""detcal's command-line apps: thin Hydra wrappers around the Python API
(:mod:`detcal.pipeline`). Each app composes its config, converts it once into
a typed spec (:mod:`detcal.apps.schema`) and calls the API."""
