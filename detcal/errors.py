"""Public alias of :mod:`detcal.core.errors`.

Kept so that ``from detcal.errors import DetcalInputError`` keeps working; the
package itself imports :mod:`detcal.core.errors`.
"""

from detcal.core.errors import DetcalError, DetcalInputError, NotFittedError

__all__ = ["DetcalError", "DetcalInputError", "NotFittedError"]
