"""TensorRT's build progress as rich progress bars: the renderer (free of TensorRT, tested anywhere) and the
IProgressMonitor that delegates to it."""

from __future__ import annotations

import threading

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class ProgressRenderer:
    """Renders TensorRT's nested build phases as rich progress bars (the IProgressMonitor callbacks delegate here).

    Kept free of TensorRT so it can be tested anywhere; ``cancel()`` makes the next step_complete answer False,
    which asks TensorRT to stop building."""

    def __init__(self, console=None, enabled: bool = True):
        self.enabled = enabled
        self._cancel = False
        self._tasks: dict[str, int] = {}
        self._parents: dict[str, str | None] = {}
        self._lock = threading.Lock()  # TensorRT reports from several builder threads
        self._progress = None
        self.events: list[tuple] = []
        if enabled:

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=console, transient=False)

    def __enter__(self):
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()
        return False

    def cancel(self) -> None:
        self._cancel = True

    def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
        with self._lock:
            self._phase_start(phase_name, parent_phase, num_steps)

    def step_complete(self, phase_name: str, step: int) -> bool:
        with self._lock:
            return self._step_complete(phase_name, step)

    def phase_finish(self, phase_name: str) -> None:
        with self._lock:
            self._phase_finish(phase_name)

    def _phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
        self.events.append(("start", phase_name, parent_phase, num_steps))
        depth = 0
        p = parent_phase
        while p is not None and p in self._tasks:
            depth += 1
            p = self._parents.get(p)
        self._parents[phase_name] = parent_phase
        if self._progress is not None:
            self._tasks[phase_name] = self._progress.add_task("  " * depth + phase_name, total=max(num_steps, 1))
        else:
            self._tasks[phase_name] = len(self._tasks)

    def _step_complete(self, phase_name: str, step: int) -> bool:
        self.events.append(("step", phase_name, step))
        if self._progress is not None and phase_name in self._tasks:
            self._progress.update(self._tasks[phase_name], completed=step + 1)
        return not self._cancel

    def _phase_finish(self, phase_name: str) -> None:
        self.events.append(("finish", phase_name))
        task = self._tasks.pop(phase_name, None)
        parent = self._parents.pop(phase_name, None)
        if self._progress is not None and task is not None:
            if parent is None:  # top-level phases stay on screen, completed; nested ones make room
                total = next(t.total for t in self._progress.tasks if t.id == task)
                self._progress.update(task, completed=total)
            else:
                self._progress.remove_task(task)


def make_progress_monitor(trt, renderer: ProgressRenderer):
    """A trt.IProgressMonitor that forwards to ``renderer`` (TensorRT calls it from its build threads)."""

    class _Monitor(trt.IProgressMonitor):
        def __init__(self):
            trt.IProgressMonitor.__init__(self)

        def phase_start(self, phase_name, parent_phase, num_steps):
            renderer.phase_start(phase_name, parent_phase, num_steps)

        def step_complete(self, phase_name, step):
            return renderer.step_complete(phase_name, step)

        def phase_finish(self, phase_name):
            renderer.phase_finish(phase_name)

    return _Monitor()
