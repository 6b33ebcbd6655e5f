"""Chaos game (after pyperformance's bm_chaos): iterate random affine maps
of a spline-bounded shape and rasterise the points into a small image.

Pure-Python floating point in small objects (points, splines), random
numbers and method calls, as in pyperformance's chaos benchmark.
"""
import os
import random

# Points at BENCH_SCALE=1 (about 2.5 s bare on the reference machine).
ITERATIONS = 760_000
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ["Chaos.transform_point", "Spline.__call__", "Chaos.create_image"]
WIDTH = HEIGHT = 256


class Point:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y


class Spline:
    """A quadratic B-spline through a few control points."""

    def __init__(self, points):
        self.points = points

    def __call__(self, u):
        n = len(self.points) - 2
        seg = min(int(u * n), n - 1)
        t = u * n - seg
        p0, p1, p2 = self.points[seg], self.points[seg + 1], self.points[seg + 2]
        a = 0.5 * (1 - t) ** 2
        b = 0.5 + t * (1 - t)
        c = 0.5 * t * t
        return Point(a * p0.x + b * p1.x + c * p2.x,
                     a * p0.y + b * p1.y + c * p2.y)


class Chaos:
    def __init__(self, splines, rng):
        self.splines = splines
        self.rng = rng
        self.minx, self.maxx, self.miny, self.maxy = -1.5, 1.5, -1.5, 1.5

    def transform_point(self, point):
        spline = self.splines[self.rng.randrange(len(self.splines))]
        u = self.rng.random()
        base = spline(u)
        x = base.x + (point.x - base.x) * 0.5
        y = base.y + (point.y - base.y) * 0.5
        # Keep the point in the box, as the original's truncate() does.
        x = min(max(x, self.minx), self.maxx)
        y = min(max(y, self.miny), self.maxy)
        return Point(x, y)

    def create_image(self, iterations):
        image = [[0] * WIDTH for _ in range(HEIGHT)]
        point = Point(0.0, 0.0)
        sx = (WIDTH - 1) / (self.maxx - self.minx)
        sy = (HEIGHT - 1) / (self.maxy - self.miny)
        for _ in range(iterations):
            point = self.transform_point(point)
            image[int((point.y - self.miny) * sy)][int((point.x - self.minx) * sx)] += 1
        return image


def main():
    rng = random.Random(1234)
    shapes = [
        [(1.6, 0.0), (1.2, 0.5), (0.4, 1.3), (-0.5, 1.1), (-1.4, 0.3)],
        [(-1.3, -0.2), (-0.6, -1.2), (0.3, -1.4), (1.0, -0.6), (1.4, 0.1)],
        [(-0.3, 0.2), (0.0, -0.4), (0.5, 0.1), (0.2, 0.6), (-0.4, 0.7)],
    ]
    splines = [Spline([Point(x, y) for x, y in s]) for s in shapes]
    image = Chaos(splines, rng).create_image(int(ITERATIONS * SCALE))
    lit = sum(1 for row in image for v in row if v)
    print(f"chaos: {lit} pixels lit, {sum(map(sum, image))} points")


if __name__ == "__main__":
    main()
