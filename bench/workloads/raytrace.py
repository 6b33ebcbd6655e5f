"""Ray tracer: spheres over a checkered floor, two point lights, hard shadows
and mirror reflections, rendered into an in-memory image.

Pure Python, object-heavy: small vector objects are created and thrown away by
the million, as in most numerical code written without numpy.
"""
import math
import os

# Image side in pixels at BENCH_SCALE=1 (about 2.5 s bare on the reference
# machine).  Work grows with the square of the side, so the side is scaled by
# the square root of BENCH_SCALE to keep the time proportional to it.
SIDE = 220
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['Sphere.hit', 'Scene.nearest', 'Scene.trace', 'render']
MAX_DEPTH = 4
EPSILON = 1e-6


class Vec:
    __slots__ = ("x", "y", "z")

    def __init__(self, x, y, z):
        self.x = x
        self.y = y
        self.z = z

    def __add__(self, o):
        return Vec(self.x + o.x, self.y + o.y, self.z + o.z)

    def __sub__(self, o):
        return Vec(self.x - o.x, self.y - o.y, self.z - o.z)

    def scale(self, k):
        return Vec(self.x * k, self.y * k, self.z * k)

    def mul(self, o):
        return Vec(self.x * o.x, self.y * o.y, self.z * o.z)

    def dot(self, o):
        return self.x * o.x + self.y * o.y + self.z * o.z

    def cross(self, o):
        return Vec(self.y * o.z - self.z * o.y,
                   self.z * o.x - self.x * o.z,
                   self.x * o.y - self.y * o.x)

    def length(self):
        return math.sqrt(self.dot(self))

    def unit(self):
        n = self.length()
        return Vec(self.x / n, self.y / n, self.z / n)

    def reflect(self, normal):
        return self - normal.scale(2.0 * self.dot(normal))


BLACK = Vec(0.0, 0.0, 0.0)
WHITE = Vec(1.0, 1.0, 1.0)


class Ray:
    __slots__ = ("origin", "direction")

    def __init__(self, origin, direction):
        self.origin = origin
        self.direction = direction.unit()

    def at(self, t):
        return self.origin + self.direction.scale(t)


class Material:
    def __init__(self, colour, diffuse=0.8, specular=0.3, shininess=30,
                 mirror=0.0):
        self.colour = colour
        self.diffuse = diffuse
        self.specular = specular
        self.shininess = shininess
        self.mirror = mirror

    def colour_at(self, point):
        return self.colour


class Checker(Material):
    def __init__(self, a, b, size, **kw):
        super().__init__(a, **kw)
        self.other = b
        self.size = size

    def colour_at(self, point):
        i = math.floor(point.x / self.size) + math.floor(point.z / self.size)
        return self.colour if i % 2 == 0 else self.other


class Sphere:
    def __init__(self, centre, radius, material):
        self.centre = centre
        self.radius = radius
        self.material = material

    def hit(self, ray):
        oc = ray.origin - self.centre
        b = oc.dot(ray.direction)
        c = oc.dot(oc) - self.radius * self.radius
        disc = b * b - c
        if disc < 0.0:
            return None
        root = math.sqrt(disc)
        t = -b - root
        if t > EPSILON:
            return t
        t = -b + root
        if t > EPSILON:
            return t
        return None

    def normal(self, point):
        return (point - self.centre).unit()


class Plane:
    def __init__(self, point, normal, material):
        self.point = point
        self.n = normal.unit()
        self.material = material

    def hit(self, ray):
        denom = self.n.dot(ray.direction)
        if abs(denom) < EPSILON:
            return None
        t = (self.point - ray.origin).dot(self.n) / denom
        return t if t > EPSILON else None

    def normal(self, point):
        return self.n


class Scene:
    def __init__(self):
        self.objects = []
        self.lights = []
        self.ambient = 0.08
        self.sky = Vec(0.55, 0.7, 0.95)

    def nearest(self, ray):
        best_t = math.inf
        best = None
        for obj in self.objects:
            t = obj.hit(ray)
            if t is not None and t < best_t:
                best_t = t
                best = obj
        return best, best_t

    def in_shadow(self, point, to_light, distance):
        ray = Ray(point, to_light)
        for obj in self.objects:
            t = obj.hit(ray)
            if t is not None and t < distance:
                return True
        return False

    def trace(self, ray, depth):
        obj, t = self.nearest(ray)
        if obj is None:
            return self.sky.scale(0.5 + 0.5 * ray.direction.y)
        point = ray.at(t)
        normal = obj.normal(point)
        mat = obj.material
        base = mat.colour_at(point)
        colour = base.scale(self.ambient)
        lift = point + normal.scale(1e-4)
        for light_pos, light_colour in self.lights:
            to_light = light_pos - point
            distance = to_light.length()
            to_light = to_light.scale(1.0 / distance)
            lambert = normal.dot(to_light)
            if lambert <= 0.0 or self.in_shadow(lift, to_light, distance):
                continue
            colour = colour + base.mul(light_colour).scale(mat.diffuse * lambert)
            half = (to_light - ray.direction).unit()
            spec = max(0.0, normal.dot(half)) ** mat.shininess
            colour = colour + light_colour.scale(mat.specular * spec)
        if mat.mirror > 0.0 and depth < MAX_DEPTH:
            bounce = Ray(lift, ray.direction.reflect(normal))
            colour = colour.scale(1.0 - mat.mirror) + \
                self.trace(bounce, depth + 1).scale(mat.mirror)
        return colour


def build_scene():
    scene = Scene()
    scene.objects.append(Plane(Vec(0, -1, 0), Vec(0, 1, 0),
                               Checker(Vec(0.9, 0.9, 0.9), Vec(0.2, 0.2, 0.25),
                                       1.0, mirror=0.2)))
    scene.objects.append(Sphere(Vec(0, 0, 5), 1.0,
                                Material(Vec(0.9, 0.2, 0.2), mirror=0.35)))
    scene.objects.append(Sphere(Vec(-2.2, -0.3, 6.5), 0.7,
                                Material(Vec(0.2, 0.8, 0.3), shininess=60)))
    scene.objects.append(Sphere(Vec(2.0, 0.2, 7.0), 1.2,
                                Material(Vec(0.3, 0.4, 0.95), mirror=0.6)))
    scene.objects.append(Sphere(Vec(0.6, -0.7, 3.4), 0.3,
                                Material(Vec(0.95, 0.85, 0.2))))
    scene.lights.append((Vec(-5, 6, -2), Vec(1.0, 0.95, 0.9)))
    scene.lights.append((Vec(6, 4, 1), Vec(0.3, 0.35, 0.5)))
    return scene


def render(scene, width, height):
    eye = Vec(0.0, 0.6, -1.5)
    target = Vec(0.0, 0.0, 5.0)
    forward = (target - eye).unit()
    right = Vec(0, 1, 0).cross(forward).unit()
    up = forward.cross(right)
    fov = math.tan(math.radians(55) / 2)
    image = []
    for j in range(height):
        row = []
        v = (1.0 - 2.0 * (j + 0.5) / height) * fov
        for i in range(width):
            u = (2.0 * (i + 0.5) / width - 1.0) * fov * width / height
            direction = forward + right.scale(u) + up.scale(v)
            c = scene.trace(Ray(eye, direction), 0)
            row.append((min(255, int(c.x * 255)), min(255, int(c.y * 255)),
                        min(255, int(c.z * 255))))
        image.append(row)
    return image


def main():
    side = max(8, int(SIDE * math.sqrt(SCALE)))
    image = render(build_scene(), side, side)
    checksum = sum(sum(r + g + b for r, g, b in row) for row in image)
    print(f"raytrace {side}x{side} checksum={checksum}")


if __name__ == "__main__":
    main()
