"""Richards: a simulation of a small operating-system kernel, after Martin
Richards' classic benchmark. One idle task, one worker, two packet handlers
and two devices pass packets through a priority scheduler.

Pure Python with many small method calls, attribute loads and linked lists:
the object-oriented, branchy shape of a lot of application code.
"""
import os

# Complete simulations at BENCH_SCALE=1 (about 2.5 s bare on the reference
# machine); each one runs IDLE_TICKS ticks of the idle task.
RUNS = 26
IDLE_TICKS = 10_000
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
# The functions a user would decorate with @profile for line_profiler and
# memory_profiler (bench/run.py makes a decorated copy from this list).
HOT = ['Kernel.run', 'WorkerTask.step', 'HandlerTask.step', 'DeviceTask.step', 'IdleTask.step']

# Task identities, in the order the scheduler's table holds them.
IDLE, WORKER, HANDLER_A, HANDLER_B, DEVICE_A, DEVICE_B = range(6)
PACKET_DEVICE, PACKET_WORK = 0, 1
DATA_SIZE = 4


class Packet:
    __slots__ = ("link", "owner", "kind", "index", "data")

    def __init__(self, link, owner, kind):
        self.link = link
        self.owner = owner
        self.kind = kind
        self.index = 0
        self.data = [0] * DATA_SIZE


def enqueue(queue, packet):
    """Append packet to the singly linked queue; return the queue's head."""
    packet.link = None
    if queue is None:
        return packet
    tail = queue
    while tail.link is not None:
        tail = tail.link
    tail.link = packet
    return queue


class Task:
    """A task is runnable when it is not held and either not waiting, or
    waiting with a packet in its queue."""

    def __init__(self, kernel, ident, priority, queue):
        self.kernel = kernel
        self.ident = ident
        self.priority = priority
        self.queue = queue
        self.held = False
        self.waiting = queue is None
        self.next = None

    def runnable(self):
        return not self.held and (not self.waiting or self.queue is not None)

    def take_packet(self):
        if self.waiting and self.queue is not None:
            packet = self.queue
            self.queue = packet.link
            self.waiting = False
            return packet
        return None

    def receive(self, packet, sender):
        """Put packet on this task's queue; return the task to run next."""
        was_empty = self.queue is None
        self.queue = enqueue(self.queue, packet)
        if was_empty and self.priority > sender.priority:
            return self
        return sender

    def step(self, packet):
        raise NotImplementedError


class IdleTask(Task):
    def __init__(self, kernel, ident, priority, ticks):
        super().__init__(kernel, ident, priority, None)
        self.waiting = False
        self.seed = 1
        self.ticks = ticks

    def step(self, packet):
        k = self.kernel
        self.ticks -= 1
        if self.ticks == 0:
            return k.hold_current()
        # A 16-bit linear feedback shift register picks which device to wake.
        if self.seed & 1 == 0:
            self.seed >>= 1
            return k.release(DEVICE_A)
        self.seed = (self.seed >> 1) ^ 0xD008
        return k.release(DEVICE_B)


class WorkerTask(Task):
    def __init__(self, kernel, ident, priority, queue):
        super().__init__(kernel, ident, priority, queue)
        self.target = HANDLER_A
        self.letter = 0

    def step(self, packet):
        k = self.kernel
        if packet is None:
            return k.wait_current()
        self.target = HANDLER_B if self.target == HANDLER_A else HANDLER_A
        packet.owner = self.target
        packet.index = 0
        for i in range(DATA_SIZE):
            self.letter = self.letter % 26 + 1
            packet.data[i] = self.letter
        return k.send(packet)


class HandlerTask(Task):
    def __init__(self, kernel, ident, priority, queue):
        super().__init__(kernel, ident, priority, queue)
        self.work = None
        self.devices = None

    def step(self, packet):
        k = self.kernel
        if packet is not None:
            if packet.kind == PACKET_WORK:
                self.work = enqueue(self.work, packet)
            else:
                self.devices = enqueue(self.devices, packet)
        if self.work is not None:
            work = self.work
            if work.index >= DATA_SIZE:
                self.work = work.link
                return k.send(work)
            if self.devices is not None:
                dev = self.devices
                self.devices = dev.link
                dev.index = work.data[work.index]
                work.index += 1
                return k.send(dev)
        return k.wait_current()


class DeviceTask(Task):
    def __init__(self, kernel, ident, priority):
        super().__init__(kernel, ident, priority, None)
        self.pending = None

    def step(self, packet):
        k = self.kernel
        if packet is None:
            if self.pending is None:
                return k.wait_current()
            out = self.pending
            self.pending = None
            return k.send(out)
        self.pending = packet
        k.output_count += 1
        return k.hold_current()


class Kernel:
    def __init__(self, idle_ticks):
        self.sends = 0
        self.holds = 0
        self.output_count = 0
        self.tasks = [None] * 6
        self.current = None

        self.add(IdleTask(self, IDLE, 0, idle_ticks))

        work = Packet(None, WORKER, PACKET_WORK)
        work = Packet(work, WORKER, PACKET_WORK)
        self.add(WorkerTask(self, WORKER, 1000, work))

        for ident, device in ((HANDLER_A, DEVICE_A), (HANDLER_B, DEVICE_B)):
            q = Packet(None, device, PACKET_DEVICE)
            q = Packet(q, device, PACKET_DEVICE)
            q = Packet(q, device, PACKET_DEVICE)
            self.add(HandlerTask(self, ident, 2000 + ident, q))

        self.add(DeviceTask(self, DEVICE_A, 4000))
        self.add(DeviceTask(self, DEVICE_B, 5000))

        # The run list is ordered by priority, highest first.
        order = sorted(self.tasks, key=lambda t: -t.priority)
        for a, b in zip(order, order[1:]):
            a.next = b
        self.head = order[0]

    def add(self, task):
        self.tasks[task.ident] = task

    def hold_current(self):
        self.holds += 1
        self.current.held = True
        return self.current.next

    def wait_current(self):
        self.current.waiting = True
        return self.current

    def release(self, ident):
        task = self.tasks[ident]
        task.held = False
        if task.priority > self.current.priority:
            return task
        return self.current

    def send(self, packet):
        self.sends += 1
        target = self.tasks[packet.owner]
        packet.owner = self.current.ident
        return target.receive(packet, self.current)

    def run(self):
        task = self.head
        while task is not None:
            if task.runnable():
                self.current = task
                task = task.step(task.take_packet())
            else:
                task = task.next


def main():
    runs = max(1, int(RUNS * SCALE))
    totals = [0, 0, 0]
    for _ in range(runs):
        kernel = Kernel(IDLE_TICKS)
        kernel.run()
        totals[0] += kernel.sends
        totals[1] += kernel.holds
        totals[2] += kernel.output_count
    print(f"richards runs={runs} sends={totals[0]} holds={totals[1]} "
          f"output={totals[2]}")


if __name__ == "__main__":
    main()
