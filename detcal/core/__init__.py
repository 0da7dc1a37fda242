"""The bottom layer: typed records (:mod:`.types`), box arithmetic (:mod:`.boxes`), errors (:mod:`.errors`).

Nothing here imports another detcal package.
"""
