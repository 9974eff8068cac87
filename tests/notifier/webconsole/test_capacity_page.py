"""The console's capacity page: the capacity file's thresholds per model and its plots, embedded; only files
inside the capacity file's folder; a page that says what to do without a file."""

from __future__ import annotations

import base64

import pytest

from tailhound.capacity_file import CapacityFile, CapacityThresholds
from tailhound.notifier.webconsole.capacity_page import capacity_page
from tests.notifier.webconsole.markup import parse_page

from .api_helpers import NOW, FakeService, api, fetch

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def write_file(tmp_path, plots: list[str]) -> object:
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "m-ttft.png").write_bytes(PNG)
    (tmp_path.parent / "outside.png").write_bytes(PNG)
    cf = CapacityFile(
        generated_at=NOW - 3600,
        source="loadtest:result.json",
        models={
            "meta-llama/*": CapacityThresholds(
                safe_request_rate=9.5, queue_scale_out=4, max_num_seqs=96, ttft_knee_s=0.8
            )
        },
        plots={"meta-llama/*": plots},
    )
    path = tmp_path / "capacity.yaml"
    path.write_text(__import__("yaml").safe_dump(cf.model_dump(mode="json")))
    return path


def test_the_thresholds_and_the_plots_inside_the_files_folder(tmp_path):
    path = write_file(tmp_path, ["plots/m-ttft.png", "../outside.png", "plots/missing.png", "/etc/passwd"])
    page = capacity_page(path, NOW)
    parsed = parse_page(page)
    assert len(parsed.by_testid("capacity-plot")) == 1
    assert 'data-testid="capacity-row" data-model="meta-llama/*"' in page and "9.5 req/s" in page and "800 ms" in page
    assert page.count('data-testid="capacity-plot"') == 1 and "data:image/png;base64," in page
    assert "outside.png" not in page and "passwd" not in page


@pytest.mark.parametrize("content", [None, "models: {}\n"])
def test_without_a_usable_file_the_page_says_what_to_do(tmp_path, content):
    path = None
    if content is not None:
        path = tmp_path / "capacity.yaml"
        path.write_text(content)
    page = capacity_page(path, NOW)
    assert 'data-testid="capacity-missing"' in page
    assert ("tailhound capacity" in page) if content is None else ("cannot be read" in page)


async def test_the_console_serves_it(tmp_path):
    service = FakeService()
    service.capacity_file = write_file(tmp_path, ["plots/m-ttft.png"])
    async with api(service=service) as (_, base):
        status, headers, page = await fetch(base, "/console/capacity")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "img-src 'self' data:" in headers["Content-Security-Policy"]
    assert 'data-testid="capacity-plot"' in page and '<a href="/console/capacity" aria-current=page>' in page
