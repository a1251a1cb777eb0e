"""How many rows (or pairs) an export saw with one problem, and where it saw the first: what its warning says."""


class Sightings:
    """A count and the place of the first sighting (an output line, a source row, with what was seen there).

    The export tallies keep one per warning that names its first row; false while nothing was seen.
    """

    __slots__ = ("n", "first")

    def __init__(self):
        self.n = 0
        self.first = None

    def see(self, where):
        self.n += 1
        if self.first is None:
            self.first = where

    def __bool__(self):
        return self.n > 0
