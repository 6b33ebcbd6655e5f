"""N-body: the Sun and the four giant planets, integrated with a symplectic
Euler step; the system's energy is reported before and after.

Pure Python floating point in tight loops over lists, with no objects made in
the inner loop: the kind of code where per-bytecode overhead dominates.
"""
import os

# Time steps at BENCH_SCALE=1 (about 2.5 s bare on the reference machine).
STEPS = 280_000
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['advance', 'energy']

PI = 3.141592653589793
SOLAR_MASS = 4 * PI * PI
DAYS_PER_YEAR = 365.24


def make_bodies():
    # Positions in AU, velocities in AU/day (converted to AU/year), masses in
    # solar masses: rounded orbital elements, close enough to be realistic.
    raw = {
        "sun": ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], 1.0),
        "jupiter": ([4.84, -1.16, -0.104],
                    [1.66e-3, 7.70e-3, -6.90e-5], 9.55e-4),
        "saturn": ([8.34, 4.12, -0.403],
                   [-2.77e-3, 5.00e-3, 2.30e-5], 2.86e-4),
        "uranus": ([12.89, -15.11, -0.223],
                   [2.96e-3, 2.38e-3, -2.96e-5], 4.37e-5),
        "neptune": ([15.38, -25.92, 0.179],
                    [2.68e-3, 1.63e-3, -9.51e-5], 5.15e-5),
    }
    bodies = []
    for pos, vel, mass in raw.values():
        bodies.append([pos[0], pos[1], pos[2],
                       vel[0] * DAYS_PER_YEAR, vel[1] * DAYS_PER_YEAR,
                       vel[2] * DAYS_PER_YEAR, mass * SOLAR_MASS])
    return bodies


def offset_momentum(bodies):
    px = py = pz = 0.0
    for b in bodies:
        px += b[3] * b[6]
        py += b[4] * b[6]
        pz += b[5] * b[6]
    sun = bodies[0]
    sun[3] = -px / SOLAR_MASS
    sun[4] = -py / SOLAR_MASS
    sun[5] = -pz / SOLAR_MASS


def energy(bodies):
    e = 0.0
    n = len(bodies)
    for i in range(n):
        x1, y1, z1, vx, vy, vz, m1 = bodies[i]
        e += 0.5 * m1 * (vx * vx + vy * vy + vz * vz)
        for j in range(i + 1, n):
            x2, y2, z2, _, _, _, m2 = bodies[j]
            dx, dy, dz = x1 - x2, y1 - y2, z1 - z2
            e -= m1 * m2 / (dx * dx + dy * dy + dz * dz) ** 0.5
    return e


def advance(bodies, dt, steps):
    pairs = [(bodies[i], bodies[j])
             for i in range(len(bodies)) for j in range(i + 1, len(bodies))]
    for _ in range(steps):
        for b1, b2 in pairs:
            dx = b1[0] - b2[0]
            dy = b1[1] - b2[1]
            dz = b1[2] - b2[2]
            d2 = dx * dx + dy * dy + dz * dz
            mag = dt / (d2 * d2 ** 0.5)
            m1 = b1[6] * mag
            m2 = b2[6] * mag
            b1[3] -= dx * m2
            b1[4] -= dy * m2
            b1[5] -= dz * m2
            b2[3] += dx * m1
            b2[4] += dy * m1
            b2[5] += dz * m1
        for b in bodies:
            b[0] += dt * b[3]
            b[1] += dt * b[4]
            b[2] += dt * b[5]


def main():
    steps = max(100, int(STEPS * SCALE))
    bodies = make_bodies()
    offset_momentum(bodies)
    before = energy(bodies)
    advance(bodies, 0.01, steps)
    after = energy(bodies)
    print(f"nbody steps={steps} energy {before:.9f} -> {after:.9f}")


if __name__ == "__main__":
    main()
