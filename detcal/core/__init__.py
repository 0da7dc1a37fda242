"""The bottom layer: typed records (:mod:`.types`), the typed result blocks metrics.json serialises
(:mod:`.results`), box arithmetic (:mod:`.boxes`), errors (:mod:`.errors`).

Nothing here imports another detcal package.
"""
