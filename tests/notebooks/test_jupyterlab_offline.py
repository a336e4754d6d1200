"""JupyterLab in headless Chromium: notebook 01's altair charts draw with no network and follow the α slider.

What a new user does, end to end: start ``jupyter lab`` from the project's environment, open
``notebooks/01_flops_and_theory.ipynb``, Run All, look at the charts, move the α slider. The test
asserts that every chart is *drawn* (a vega-embed container with SVG or canvas marks, no "Error
loading script"), that the slider chart is redrawn with new content, that the page never requested
anything outside this machine (every request and websocket is recorded; non-local requests are
also aborted, so a CDN that happens to be reachable in CI cannot hide the problem), and that the
notebook's tables went to the outputs folder rather than next to the notebook.

Environment:
    SPECNB_REPO               repository root (default: the folder above ``tests/``)
    SPECNB_CHROMIUM           a Chromium/Chrome executable (default: playwright's own browser if
                              ``playwright install chromium`` was run, else ``chromium`` on PATH)
    SPECNB_BROWSER_OPTIONAL   ``1``: skip, with a one-line reason, when playwright or Chromium is
                              missing. Unset (the default, and what CI does): fail loudly instead.
    SPECNB_BROWSER_ARTIFACTS  folder for the screenshots (default: pytest's ``tmp_path``)

Everything runs in temporary folders: a copy of ``notebooks/``, fresh Jupyter config, data, runtime,
settings and workspace folders, a fresh browser profile. The server gets a random port and token
and is stopped with its whole process group (and its kernels) even when the test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

NOTEBOOK = "01_flops_and_theory.ipynb"
SLIDER_LABEL = "α"
MIN_CHARTS = 3  # two heatmaps (one concat chart), the break-even lines, the slider's chart
# On a shared 2-core machine a cold JupyterLab page takes ~10 s and Run All ~25 s: limits are 5-10x that.
SERVER_START_S, PAGE_LOAD_S, RUN_ALL_S, REDRAW_S = 300, 300, 600, 180  # polled: generous for a loaded machine
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
CHART_ERRORS = ("Error loading script", "Chart not drawn", "Chart error", "JavaScript Error", "<VegaLite")
SETTINGS = {  # JupyterLab user settings: no news/update toasts, no calls to jupyter.org
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}


# ---------------------------------------------------------------- prerequisites

@pytest.fixture(scope="module")
def repo_root() -> Path:
    root = Path(os.environ.get("SPECNB_REPO") or Path(__file__).resolve().parents[2]).resolve()
    assert (root / "notebooks" / NOTEBOOK).is_file(), f"no notebooks/{NOTEBOOK} under {root} (set SPECNB_REPO)"
    return root


# ---------------------------------------------------------------- the server

@contextlib.contextmanager
def jupyter_lab(repo: Path, root_dir: Path, home: Path, extra_env: dict[str, str]):
    """A JupyterLab server on 127.0.0.1, a free port and a random token, serving ``root_dir``; its
    kernels import specnb from ``repo``. Yields (base_url, token, log_path); always stopped."""
    config, data, runtime, ipython = (home / name for name in ("config", "data", "runtime", "ipython"))
    for folder in (config, data, runtime, ipython):
        folder.mkdir(parents=True, exist_ok=True)
    settings = config / "lab" / "user-settings"
    for name, values in SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(values))
    token = secrets.token_hex(16)
    (config / "jupyter_server_config.json").write_text(json.dumps({
        "ServerApp": {"ip": "127.0.0.1", "port": 0, "port_retries": 0, "open_browser": False,
                      "root_dir": str(root_dir), "allow_root": True, "terminals_enabled": False,
                      "shutdown_no_activity_timeout": 900},
        "IdentityProvider": {"token": token},
        # a safety net should this process be SIGKILLed before its teardown: idle kernels are culled
        # and the then-idle server exits by itself within ~15 minutes
        "MappingKernelManager": {"cull_idle_timeout": 600, "cull_interval": 60},
        # nothing leaves the machine from the server either: no news feed, update check or PyPI listing
        "LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
                   "extension_manager": "readonly"},
    }))
    env = {**os.environ, **extra_env,
           "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_DATA_DIR": str(data), "JUPYTER_RUNTIME_DIR": str(runtime),
           "JUPYTERLAB_SETTINGS_DIR": str(settings), "JUPYTERLAB_WORKSPACES_DIR": str(config / "lab" / "workspaces"),
           "IPYTHONDIR": str(ipython), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    env.pop("JUPYTER_PORT", None)
    log_path = home / "jupyterlab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser"], cwd=root_dir, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield _wait_for_server(proc, runtime, token, log_path), token, log_path
    finally:
        _stop(proc)


def _wait_for_server(proc: subprocess.Popen, runtime: Path, token: str, log_path: Path) -> str:
    """The server's URL once its runtime file names the port and /api/status answers."""
    deadline = time.monotonic() + SERVER_START_S
    info = runtime / f"jpserver-{proc.pid}.json"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"jupyter lab exited with {proc.returncode}:\n{_tail(log_path)}")
        if info.exists():
            try:
                url = json.loads(info.read_text())["url"]
                with urllib.request.urlopen(f"{url}api/status?token={token}", timeout=10) as answer:
                    if answer.status == 200:
                        return url
            except (OSError, ValueError, KeyError):
                pass  # half-written file or not listening yet
        time.sleep(0.5)
    raise AssertionError(f"jupyter lab did not answer within {SERVER_START_S} s:\n{_tail(log_path)}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (the server then shuts its kernels down), SIGKILL after
    20 s; kernels run in sessions of their own, so any still alive are killed by pid afterwards."""
    kernels = []
    with contextlib.suppress(ImportError, OSError, LookupError):  # no psutil, or the server already gone
        import psutil

        with contextlib.suppress(psutil.Error):
            kernels = psutil.Process(proc.pid).children(recursive=True)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)
    for child in kernels:
        with contextlib.suppress(OSError, LookupError, ImportError, psutil.Error):
            if child.is_running():  # psutil checks the start time too: never a recycled pid
                child.kill()


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("data", "blob", "about") or (parts.hostname or "") in LOCAL_HOSTS


# ---------------------------------------------------------------- page helpers (JavaScript run in the page)

KERNEL_IDLE = r"""() => [...document.querySelectorAll('.jp-StatusBar-TextItem')]
    .some(e => /\|\s*Idle\b/.test(e.textContent))"""
ALL_EXECUTED = r"""(n) => {
    const prompts = [...document.querySelectorAll('.jp-NotebookPanel .jp-CodeCell .jp-InputArea-prompt')]
        .map(e => e.textContent.trim());
    return prompts.length === n && prompts.every(t => /^\[\d+\]:$/.test(t));
}"""
# a chart is drawn when vega-embed put SVG marks (a group with children) or a non-empty canvas in it
CHARTS = r"""() => [...document.querySelectorAll('.jp-NotebookPanel .vega-embed')].map(e => {
    const svg = e.querySelector('svg.marks'), canvas = e.querySelector('canvas.marks');
    const marks = svg ? svg.querySelectorAll('path, rect, line, text, circle').length
                      : (canvas && canvas.width > 0 ? 1 : 0);
    return {marks, inWidget: !!e.closest('.widget-output'),
            content: svg ? svg.outerHTML : (canvas ? canvas.toDataURL() : '')};
})"""
# the lines of visible text (scripts excluded) that carry one of the markers passed in
CHART_ERROR_TEXT = r"""(markers) => (document.querySelector('.jp-NotebookPanel') || document.body).innerText
    .split('\n').filter(line => (markers || []).some(m => line.includes(m))).map(line => line.slice(0, 300))"""
# tracebacks and stderr (JupyterLab renders both as this MIME type); warnings pass, errors do not
ERROR_OUTPUTS = r"""() => [...document.querySelectorAll(
        '.jp-NotebookPanel .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
    .map(e => e.innerText).filter(t => /Traceback|Error\b/.test(t)).map(t => t.slice(0, 1000))"""


def test_notebook_01_charts_draw_offline_and_follow_the_alpha_slider(repo_root, chromium, tmp_path):
    sync_playwright, executable = chromium
    started = time.monotonic()
    timings: dict[str, float] = {}

    def lap(name: str) -> None:
        timings[name] = round(time.monotonic() - started, 1)

    notebooks, outputs = tmp_path / "notebooks", tmp_path / "outputs"
    shutil.copytree(repo_root / "notebooks", notebooks, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    code_cells = sum(c["cell_type"] == "code" for c in json.loads((notebooks / NOTEBOOK).read_text())["cells"])
    artifacts = Path(os.environ.get("SPECNB_BROWSER_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    requests: list[str] = []
    page_errors: list[str] = []
    page = None

    with jupyter_lab(repo_root, notebooks, tmp_path / "jupyter", {"SPECNB_OUTPUTS": str(outputs)}) as (url, token, log):
        lap("server up")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
            try:
                context = browser.new_context(viewport={"width": 1400, "height": 1000}, service_workers="block")
                context.on("request", lambda r: requests.append(r.url))
                context.route(lambda u: not _is_local(u), lambda route: route.abort("internetdisconnected"))
                page = context.new_page()
                page.set_default_timeout(60_000)
                page.on("websocket", lambda ws: requests.append(ws.url))
                page.on("pageerror", lambda e: page_errors.append(str(e)[:300]))

                page.goto(f"{url}lab/tree/{NOTEBOOK}?token={token}", timeout=PAGE_LOAD_S * 1000)
                page.wait_for_function(f"() => ({KERNEL_IDLE})() || !!document.querySelector('.jp-Dialog')",
                                       timeout=PAGE_LOAD_S * 1000, polling=500)
                dialogs = page.locator(".jp-Dialog")
                assert dialogs.count() == 0, f"a dialog is in the way: {dialogs.first.inner_text()[:500]}"
                assert page.locator(".jp-NotebookPanel").count() == 1
                lap("notebook open, kernel idle")

                page.get_by_role("menuitem", name="Run", exact=True).click()
                page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
                page.wait_for_function(ALL_EXECUTED, arg=code_cells, timeout=RUN_ALL_S * 1000, polling=500)
                page.wait_for_function(KERNEL_IDLE, timeout=RUN_ALL_S * 1000, polling=500)
                assert page.evaluate(ERROR_OUTPUTS) == []
                lap("run all done")

                # drawn, or an error message on the page (fail fast with it rather than time out)
                page.wait_for_function(f"""(markers) => ({CHARTS})().filter(c => c.marks > 0).length >= {MIN_CHARTS}
                                                  || ({CHART_ERROR_TEXT})(markers).length > 0""",
                                       arg=list(CHART_ERRORS), timeout=REDRAW_S * 1000, polling=500)
                assert page.evaluate(CHART_ERROR_TEXT, list(CHART_ERRORS)) == []
                charts = page.evaluate(CHARTS)
                assert len(charts) >= MIN_CHARTS and all(c["marks"] > 0 for c in charts), [c["marks"] for c in charts]
                lap("charts drawn")

                # a tooltip is vega's own JavaScript at work: hover the corner of a heatmap cell (its
                # centre is the cell's text label, which has no tooltip)
                cell = page.locator(".vega-embed svg.marks .mark-rect path").first
                cell.scroll_into_view_if_needed()
                box = cell.bounding_box()
                page.mouse.move(box["x"] + 3, box["y"] + 3)
                page.mouse.move(box["x"] + 4, box["y"] + 4)
                page.locator("#vg-tooltip-element.visible").wait_for(timeout=REDRAW_S * 1000)
                assert "speedup" in page.locator("#vg-tooltip-element").inner_text()

                slider = page.locator(".widget-slider", has=page.locator(".widget-label", has_text=re.compile(
                    rf"^\s*{SLIDER_LABEL}\s*$")))
                readout = slider.locator(".widget-readout")
                before_value = readout.inner_text().strip()
                before = [c["content"] for c in charts if c["inWidget"]]
                assert len(before) == 1, f"{len(before)} charts inside the slider panel"
                slider.locator(".noUi-handle").scroll_into_view_if_needed()
                slider.locator(".noUi-handle").focus()
                page.keyboard.press("ArrowRight")
                page.wait_for_function(
                    f"""() => {{ const c = ({CHARTS})().filter(c => c.inWidget);
                               return c.length === 1 && c[0].marks > 0
                                      && c[0].content !== {json.dumps(before[0])}; }}""",
                    timeout=REDRAW_S * 1000, polling=500)
                after_value = readout.inner_text().strip()
                assert float(after_value) > float(before_value), (before_value, after_value)
                assert f"α={after_value}" in page.locator(".widget-output").inner_text()  # the chart's title follows
                lap("slider redrawn")

                page.locator(".widget-output").scroll_into_view_if_needed()
                page.screenshot(path=str(artifacts / "jupyterlab_offline_charts.png"))
            except BaseException:
                if page is not None:
                    with contextlib.suppress(Exception):
                        page.screenshot(path=str(artifacts / "jupyterlab_offline_failure.png"))
                print(f"page errors: {page_errors}\njupyter lab log:\n{_tail(log)}", file=sys.stderr)
                raise
            finally:
                browser.close()

    outside = sorted({u for u in requests if not _is_local(u)})
    assert outside == [], f"the page reached outside this machine: {outside}"
    written = sorted(p.name for p in outputs.glob("01_flops_and_theory.*"))
    assert "01_flops_and_theory.results.json" in written, written  # interactive output_dir: outputs/, not "."
    assert not list(notebooks.glob("*.csv")), "tables were written next to the notebook"
    lap("total")
    print(f"timings (s since start): {timings}; {len(requests)} requests, all local")
