"""Brackets around sentence ends: where a line's sentences may not be cut.

Moses splits the period off an abbreviation it does not know (``Fig .``, ``p .``, ``Vol .``, ``ca .``),
and a sentence splitter that ends a sentence before a capital or a digit then cuts "A dog runs (see
Fig. 3) in the park." after "Fig.": the demo model wrote "Ein Hund rennt. Drei Musiker befinden sich im
Park.". Inside brackets that close later in the line, a number does not begin a sentence. Both
splitters use this: pieces of a line (`nmtk.decode.long_input`) and words of markup (`nmtk.text.markup`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

OPENING, CLOSING = "([{", ")]}"


def bracket_step(text: str) -> int:
    """The brackets ``text`` opens less those it closes (``(`` 1, ``)`` -1, ``(a)`` 0)."""
    return sum(c in OPENING for c in text) - sum(c in CLOSING for c in text)


def closed_later(steps: Sequence[int] | np.ndarray) -> np.ndarray:
    """Per position (its `bracket_step` in ``steps``): whether a cut after it falls inside brackets that
    close later in the line. A bracket never closed (``:(``) holds nothing together."""
    if not len(steps):
        return np.zeros(0, dtype=bool)
    depth = np.cumsum(np.asarray(steps, dtype=np.int32))
    later = np.minimum.accumulate(depth[::-1])[::-1]  # the lowest depth from each position on
    return np.append(later[1:], depth[-1]) < depth
