"""Studies built on detcal: reproductions of published experiments (Hydra-free; apps in detcal.apps)."""
