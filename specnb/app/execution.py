"""Running one notebook's kernel under papermill, and sharing the result as offline HTML.

``execute`` runs papermill in a worker thread so that Ctrl-C reaches the main thread, which kills
the kernels it started (``kill_kernels``); the kernels talk to it over Unix sockets, not TCP
(``_TrackedKernelManager``). ``export_html`` renders a standalone page that makes no network
request. ``specnb.app.runner`` decides which notebooks run, when, and with what.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

_OFFLINE_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block data_svg scoped -%}
<div class="jp-RenderedSVG jp-OutputArea-output {{ extra_class }}" data-mime-type="image/svg+xml">
{{ output.data['image/svg+xml'] }}
</div>
{%- endblock data_svg %}
"""


class _TrackedKernelManager(AsyncKernelManager):
    """The kernel manager papermill uses. Its kernel talks over Unix sockets in a private folder
    (IPC transport) instead of TCP: no port is opened to the machine, and ipykernel has no reason to
    print its "Kernel is running over TCP without encryption" warning into the user's terminal at
    every start. It remembers the kernel it starts, so Ctrl-C can stop it."""

    started: list = []
    output_log: str | None = None  # where the kernel process writes its own stdout and stderr
    kernel_cwd: str | None = None  # the folder the kernel runs in (the run folder)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.transport = "ipc"
        self.socket_dir = None

    async def start_kernel(self, **kwargs):
        # The default socket path, "kernel-ipc", is relative: the manager and its kernel (which runs
        # in the run folder) would look in different folders. mkdtemp's folder is ours alone (0700).
        self.socket_dir = tempfile.mkdtemp(prefix="specnb-kernel-")
        self.ip = os.path.join(self.socket_dir, "kernel")
        self.connection_file = os.path.join(self.socket_dir, "kernel.json")
        with open(self.output_log or os.devnull, "ab") as out:  # the kernel holds its own copy
            await super().start_kernel(stdout=out, stderr=out, **{"cwd": self.kernel_cwd, **kwargs})
        _TrackedKernelManager.started.append(self)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart and self.socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            with contextlib.suppress(ValueError):
                _TrackedKernelManager.started.remove(self)
            if self.output_log and os.path.exists(self.output_log) and os.path.getsize(self.output_log) == 0:
                os.remove(self.output_log)

    cleanup_resources = _async_cleanup_resources


def kernel_manager(log: Path, cwd: Path) -> type[_TrackedKernelManager]:
    """The manager class for one notebook's kernel, which runs in ``cwd`` and writes its own output
    to ``log``. The kernel gets its folder at launch, not from papermill's ``cwd`` (a process-wide
    ``chdir`` while the notebook runs: two side-by-side runs would change it under each other).

    A kernel inherits the terminal otherwise, and what it prints there outside any cell is noise
    to the user: ipykernel's startup warnings, and now and then a ZMQError traceback from its own
    shutdown. A crash's last words stay in ``log`` (removed when empty). Cells' output is
    unaffected: ipykernel sends it to the notebook. A class rather than a manager: nbclient shuts
    down only the kernels of managers it created itself."""
    return type("NotebookKernelManager", (_TrackedKernelManager,), {"output_log": str(log), "kernel_cwd": str(cwd)})


def kill_kernels() -> None:
    """Kill every kernel this process started, with whatever it spawned (each kernel leads its own
    process group): the notebook's worker then ends with a dead-kernel error instead of waiting."""
    for km in list(_TrackedKernelManager.started):  # a finishing run removes its own
        process = getattr(km.provisioner, "process", None)
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
        if km.socket_dir:  # in case its papermill thread never gets to its own cleanup
            shutil.rmtree(km.socket_dir, ignore_errors=True)
    _TrackedKernelManager.started.clear()


class Stopping(threading.Event):
    """Set by the main thread when it stops every run at once; ``reason`` becomes each run's error."""

    reason = "interrupted (Ctrl-C)"


def stop_kernels(threads, stopping: Stopping | None = None, reason: str = Stopping.reason) -> None:
    """After Ctrl-C, or when one of several runs raised: tell the runs why (``stopping``), kill
    every kernel this process started and wait for the threads driving them. Meanwhile a second
    Ctrl-C is ignored, so it cannot cut the cleanup short, and papermill's "kernel died" is
    silenced: we killed it, and the CLI says why."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet = logging.getLogger("papermill")
    level, quiet.level = quiet.level, logging.CRITICAL
    try:
        if stopping is not None:
            stopping.reason = reason
            stopping.set()
        kill_kernels()
        for thread in threads:
            thread.join(60)
    finally:
        signal.signal(signal.SIGINT, previous)
        quiet.setLevel(level)


def execute(path: Path, ipynb: Path, params: dict, run_dir: Path, progress: bool,
            stopping: Stopping | None = None) -> tuple[str | None, bool]:
    """Run papermill in a worker thread: (error line or None, interrupted).

    Why a thread: nbclient installs its own SIGINT handler on the main thread's event loop, which
    shuts the kernel down but leaves the cell waiting for a reply that never comes (and zmq errors
    on the terminal). In a worker thread it installs none; Ctrl-C reaches the main thread, which
    kills the kernel, lets papermill finish with the cells it completed (saved as they completed),
    and reports the interruption."""
    import papermill

    outcome: dict[str, BaseException] = {}
    finished = threading.Event()

    def work() -> None:
        try:
            papermill.execute_notebook(str(path), str(ipynb), parameters=params, progress_bar=progress,
                                       kernel_name="python3",
                                       kernel_manager_class=kernel_manager(run_dir / f"{path.stem}.kernel.log",
                                                                           run_dir))
        except BaseException as err:  # noqa: BLE001  (handed to the main thread)
            outcome["error"] = err
        finally:
            finished.set()

    worker = threading.Thread(target=work, name=f"papermill {path.stem}", daemon=True)
    worker.start()
    try:
        # Not worker.join(0.2): before Python 3.13 a Ctrl-C landing in join() marks the running
        # thread as ended (threading's bpo-45274 handling), so stop_kernels would not wait for
        # papermill's last save and kernel cleanup, and the process could exit before them.
        while not finished.wait(0.2):
            if stopping is not None and stopping.is_set():
                kill_kernels()  # a kernel that was still starting when the others were stopped
    except KeyboardInterrupt:
        stop_kernels([worker])
        return Stopping.reason, True
    err = outcome.get("error")
    if err is not None and stopping is not None and stopping.is_set():
        return stopping.reason, True
    if err is None:
        return None, False
    if isinstance(err, papermill.PapermillExecutionError):
        return cell_error(err), False
    raise err


def cell_error(err) -> str:
    """A failing cell as one line: its number, the line of the cell that raised (the call, not the
    cell's first line, which is usually an import) and the error. The line comes from the cell's
    frame in IPython's traceback ("Cell In[4], line 12"); the first line where there is none (a
    syntax error)."""
    lines = (err.source or "").splitlines()
    plain = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(err.traceback or []))
    at = re.search(r"Cell In\[\d+\], line (\d+)", plain)
    number = int(at.group(1)) if at else 0
    failing = lines[number - 1].strip() if 0 < number <= len(lines) else next((s.strip() for s in lines if s.strip()),
                                                                              "empty")
    return f"cell {err.exec_count} ({failing!r}): {err.ename}: {err.evalue}"


def export_html(ipynb: Path) -> Path:
    """Standalone HTML with no network requests: CDN script blocks removed, images embedded.

    Charts (our own vl-convert SVG) go in as ``<svg>`` elements rather than base64 ``<img>``: their
    labels stay searchable and selectable, and the page reads them without decoding. A text
    progress bar is stored as one stream output per redraw ("\\r..."); they are merged so the page
    shows its last state only, as a terminal would.
    """
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import CoalesceStreamsPreprocessor

    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"specnb_offline.html.j2": _OFFLINE_TEMPLATE})],
        template_file="specnb_offline.html.j2",
        embed_images=True,
    )
    exporter.register_preprocessor(CoalesceStreamsPreprocessor(), enabled=True)
    body, _ = exporter.from_notebook_node(nbformat.read(ipynb, as_version=4))
    html = ipynb.with_suffix(".html")
    html.write_text(body, encoding="utf-8")
    return html
