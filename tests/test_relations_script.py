"""bench/h200_domino_relations.sh train-bench through the real step runner (bench/h200_gpu.sh, whose log names each
step), with the GPU steps stubbed to make the folders they would: which drafters each run starts from, which come
back, and what the bench compares."""

import os
import pathlib
import re
import shutil
import subprocess
import time

import pytest

BENCH = pathlib.Path(__file__).parent.parent / "bench"

# The steps that bench/h200_gpu.sh (the real one) runs, stubbed: a distilling step makes its answer folder, a
# training step its exported drafter, random bytes, so that one export can be told from another.
ISSUE4_STUB = """#!/usr/bin/env bash
[ "$1" = distill ] || exit 0
d=${DISTILL_DIR:-$WORK/distill}; mkdir -p "$d"; echo answers > "$d/shard.npz"
"""
ISSUE5_STUB = """#!/usr/bin/env bash
case "$1" in
  dflash) d=$WORK/${DFLASH_RUN:-dflash}/drafter ;;
  domino) d=$WORK/${DOMINO_NAME:-domino_$2}/drafter ;;
  bench) echo "bench ${DFLASH_RUN:-dflash} ${DOMINO_RUN:-domino_tf_curriculum} $METHODS ${BENCH_NAME:-bench5_t0}" \
    >> "$WORK/benched.log"; exit 0 ;;
  *) exit 0 ;;
esac
echo "$1 ${DFLASH_RUN:-dflash}${2:+ $2} labels=${LABELS:-data}${HEAD_LR_SCALE:+ head_lr=$HEAD_LR_SCALE}" \
  >> "$WORK/trained.log"
mkdir -p "$d"; head -c 4096 /dev/urandom > "$d/model.safetensors"
# the held-out walk that bench/best_walk.py ranks runs by: the faster the head's rate, the higher here
echo "{\\"split\\": \\"walk\\", \\"walk_mat\\": $(( 100 + ${HEAD_LR_SCALE:-1} ))}" > "$d/../metrics.jsonl"
"""

COMMON = {"FRESH": "1", "ALL_DATA": "1", "SAMPLED": "2", "TASK_WALK": "0", "EVALS": "4", "TIME_LIMIT": "700",
          "DOMINO_VARIANTS": "tf_curriculum_floor_soft", "CURRICULUM_START": "0.5", "CURRICULUM_END": "0.5",
          "SEND_DRAFTERS": "1", "SEND_FAIR": "1", "BENCH_METHODS": "vanilla,dflash,domino_block_stop"}


@pytest.fixture
def repo(tmp_path):
    """The script, its step runner and what it calls on the CPU (parts.sh, best_walk.py); the GPU steps stubbed."""
    (tmp_path / "bench").mkdir()
    for name in ("h200_domino_relations.sh", "h200_gpu.sh", "parts.sh", "best_walk.py"):
        shutil.copy(BENCH / name, tmp_path / "bench" / name)
    (tmp_path / "bench" / "h200_issue4.sh").write_text(ISSUE4_STUB)
    (tmp_path / "bench" / "h200_issue5.sh").write_text(ISSUE5_STUB)
    return tmp_path


def _train_bench(repo: pathlib.Path, work: pathlib.Path, results: pathlib.Path, **env) -> tuple[list[str], str]:
    """The GPU steps the script ran, in order (without their long PLUS_DATA lists), and its output."""
    env = {**os.environ, **COMMON, "WORK": str(work), "RESULTS": str(results), "PART_SIZE": "64K", **env}
    done = subprocess.run(["bash", str(repo / "bench" / "h200_domino_relations.sh"), "train-bench"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (results / "train-bench.done").exists()
    items = re.findall(r"^=== gpu 0: (.*) \(\d\d:\d\d:\d\d\)$", done.stdout, flags=re.M)  # h200_gpu.sh's log
    steps = [" ".join(re.sub(r"PLUS_DATA=\S*", "", item).split()) for item in items]
    return steps, done.stdout


def _unpacked(repo: pathlib.Path, parts: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    done = subprocess.run(["bash", str(repo / "bench" / "parts.sh"), "unpack", str(parts), str(dest)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return dest


def test_one_session_forks_dflash_into_the_steps_fair_pair_and_later_ones_continue_both(repo, tmp_path):
    """DOMINO_ON_DFLASH=1: DFlash trains STEPS from the target's layers; the joint Domino starts from that drafter
    (head fresh) and DFlash continues from it, the same steps each; the bench compares the two; the continued DFlash
    (not the STEPS one) and the Domino go back. A later session carries both in and continues each chain."""
    work, results = tmp_path / "w1", tmp_path / "r1"
    steps, out = _train_bench(repo, work, results, STEPS="1000", DOMINO_STEPS="600", FAIR_DFLASH_STEPS="600",
                         DOMINO_ON_DFLASH="1")
    trains = [s for s in steps if "issue5 dflash" in s or "issue5 domino" in s]
    assert len(trains) == 3
    assert "INIT_LAYERS=target STEPS=1000" in trains[0] and trains[0].endswith(" issue5 dflash")
    assert "STEPS=600" in trains[1] and f"INIT_FROM= INIT_LAYERS= INIT_BACKBONE={work}/dflash/drafter" in trains[1]
    assert trains[1].endswith(" issue5 domino tf_curriculum_floor_soft")
    assert "STEPS=600" in trains[2] and f"INIT_FROM={work}/fair_init" in trains[2]
    assert "DFLASH_RUN=dflash_fair" in trains[2]
    assert steps[-1].startswith("DFLASH_RUN=dflash_fair DOMINO_RUN=domino_tf_curriculum_floor_soft")
    assert steps[-1].endswith(" issue5 bench")
    assert out.count("packed dflash/drafter") == 1  # its parts travel once, while the benches run
    sent = _unpacked(repo, results / "drafters_dflash", tmp_path / "sent")
    assert (sent / "dflash/drafter/model.safetensors").read_bytes() == \
        (work / "dflash_fair/drafter/model.safetensors").read_bytes()  # the continued drafter, not the fork's start
    _unpacked(repo, results / "drafters_domino", sent)
    assert (sent / "domino_tf_curriculum_floor_soft/drafter/model.safetensors").read_bytes() == \
        (work / "domino_tf_curriculum_floor_soft/drafter/model.safetensors").read_bytes()

    work2, results2 = tmp_path / "w2", tmp_path / "r2"
    later, _ = _train_bench(repo, work2, results2, STEPS="600", DOMINO_STEPS="600", FAIR_DFLASH_STEPS="600",
                         TRAIN_DFLASH="0", DISTILLED=f"{results}/distilled,{results}/fresh_data,{results}/sampled_data",
                         INIT_FROM=f"{results}/drafters_dflash,{results}/drafters_domino")
    trains = [s for s in later if "issue5 dflash" in s or "issue5 domino" in s]
    assert not any("distill" in s for s in later)  # the answers came back in as parts
    assert len(trains) == 2
    assert f"INIT_FROM={work2}/init" in trains[0] and trains[0].endswith(" issue5 domino tf_curriculum_floor_soft")
    assert "INIT_BACKBONE" not in trains[0]
    assert f"INIT_FROM={work2}/fair_init" in trains[1] and "DFLASH_RUN=dflash_fair" in trains[1]
    assert (work2 / "init/domino_tf_curriculum_floor_soft/drafter/model.safetensors").read_bytes() == \
        (work / "domino_tf_curriculum_floor_soft/drafter/model.safetensors").read_bytes()
    assert (work2 / "fair_init/dflash_fair/drafter/model.safetensors").read_bytes() == \
        (work / "dflash_fair/drafter/model.safetensors").read_bytes()  # DFlash's chain continues where it stopped


def test_the_small_fork_trains_the_pair_and_neither_benches_nor_sends(repo, tmp_path):
    """The fallback for a short session (docs/training.md, session 50): the same fork, BENCH=0 and no SEND_ flag."""
    work, results = tmp_path / "w", tmp_path / "r"
    steps, out = _train_bench(repo, work, results, STEPS="600", DOMINO_STEPS="300", FAIR_DFLASH_STEPS="300",
                              DOMINO_ON_DFLASH="1", BENCH="0", SEND_DRAFTERS="0", SEND_FAIR="0")
    trains = [s for s in steps if "issue5 dflash" in s or "issue5 domino" in s]
    assert [re.search(r"STEPS=(\d+)", s).group(1) for s in trains] == ["600", "300", "300"]
    assert f"INIT_BACKBONE={work}/dflash/drafter" in trains[1] and "DFLASH_RUN=dflash_fair" in trains[2]
    assert not any(s.endswith(" bench") for s in steps)
    assert "packed dflash/drafter" not in out and not (results / "drafters_domino").exists()


@pytest.mark.parametrize("stem, branch, bench", [("600", "400", "1"), ("1000", "600", "0")])
def test_the_soft_label_fork_gives_every_run_the_targets_distributions(repo, tmp_path, stem, branch, bench):
    """The soft-label forks (docs/training.md, sessions 52 and 53): LABELS=target reaches DFlash's stem, the joint
    Domino and DFlash continued alike, so the head is all that differs between the pair; the bench follows the three
    runs, unless BENCH=0 (the larger fork, whose bench is run by hand if time is left)."""
    work, results = tmp_path / "w", tmp_path / "r"
    steps, _ = _train_bench(repo, work, results, STEPS=stem, DOMINO_STEPS=branch, FAIR_DFLASH_STEPS=branch,
                            DOMINO_ON_DFLASH="1", LABELS="target", BENCH=bench, SEND_DRAFTERS="0", SEND_FAIR="0")
    trained = (work / "trained.log").read_text().splitlines()
    assert trained == ["dflash dflash labels=target", "domino dflash tf_curriculum_floor_soft labels=target",
                       "dflash dflash_fair labels=target"]
    trains = [s for s in steps if "issue5 dflash" in s or "issue5 domino" in s]
    assert [re.search(r"STEPS=(\d+)", s).group(1) for s in trains] == [stem, branch, branch]
    if bench == "1":
        assert steps[-1].startswith("DFLASH_RUN=dflash_fair DOMINO_RUN=domino_tf_curriculum_floor_soft")
        assert steps[-1].endswith(" issue5 bench")
    else:
        assert not any(s.endswith(" bench") for s in steps)


def test_a_fork_sends_its_base_and_later_forks_start_from_it(repo, tmp_path):
    """The head-rate fork (docs/training.md, session 54): HEAD_LR_SCALE reaches the runs (the Domino one reads it);
    SEND_DRAFTERS=1 without SEND_FAIR sends the fork's STEPS-step base back. A later fork carries that base in
    (INIT_FROM, TRAIN_DFLASH=0) and starts both branches from it, bit for bit, with no DFlash stem trained."""
    work, results = tmp_path / "w1", tmp_path / "r1"
    _train_bench(repo, work, results, STEPS="600", DOMINO_STEPS="400", FAIR_DFLASH_STEPS="400", DOMINO_ON_DFLASH="1",
                 LABELS="target", HEAD_LR_SCALE="3", BENCH="0", SEND_DRAFTERS="1", SEND_FAIR="0")
    assert (work / "trained.log").read_text().splitlines()[1] == \
        "domino dflash tf_curriculum_floor_soft labels=target head_lr=3"
    base = (work / "dflash/drafter/model.safetensors").read_bytes()
    sent = _unpacked(repo, results / "drafters_dflash", tmp_path / "sent")
    assert (sent / "dflash/drafter/model.safetensors").read_bytes() == base

    work2, results2 = tmp_path / "w2", tmp_path / "r2"
    steps, _ = _train_bench(repo, work2, results2, STEPS="400", DOMINO_STEPS="400", FAIR_DFLASH_STEPS="400",
                            DOMINO_ON_DFLASH="1", LABELS="target", BENCH="0", SEND_DRAFTERS="0", SEND_FAIR="0",
                            TRAIN_DFLASH="0", DISTILLED=f"{results}/distilled,{results}/fresh_data,"
                            f"{results}/sampled_data", INIT_FROM=f"{results}/drafters_dflash")
    assert (work2 / "trained.log").read_text().splitlines() == [
        "domino dflash tf_curriculum_floor_soft labels=target", "dflash dflash_fair labels=target"]
    trains = [s for s in steps if "issue5 dflash" in s or "issue5 domino" in s]
    assert f"INIT_FROM= INIT_LAYERS= INIT_BACKBONE={work2}/dflash/drafter" in trains[0]
    assert f"INIT_FROM={work2}/fair_init" in trains[1]
    assert (work2 / "dflash/drafter/model.safetensors").read_bytes() == base
    assert (work2 / "fair_init/dflash_fair/drafter/model.safetensors").read_bytes() == base


def test_base_only_trains_and_sends_the_forks_base_alone(repo, tmp_path):
    """BASE_ONLY=1: a short session trains the fork's DFlash base, packs it to go back, and stops there; without
    SEND_DRAFTERS=1 it is an error before anything runs."""
    work, results = tmp_path / "w", tmp_path / "r"
    _train_bench(repo, work, results, STEPS="600", DOMINO_STEPS="400", FAIR_DFLASH_STEPS="400", DOMINO_ON_DFLASH="1",
                 LABELS="target", BENCH="0", SEND_DRAFTERS="1", SEND_FAIR="0", BASE_ONLY="1")
    assert (work / "trained.log").read_text().splitlines() == ["dflash dflash labels=target"]
    sent = _unpacked(repo, results / "drafters_dflash", tmp_path / "sent")
    assert (sent / "dflash/drafter/model.safetensors").read_bytes() == \
        (work / "dflash/drafter/model.safetensors").read_bytes()
    env = {**os.environ, **COMMON, "WORK": str(tmp_path / "w2"), "RESULTS": str(tmp_path / "r2"), "STEPS": "600",
           "BASE_ONLY": "1", "SEND_DRAFTERS": "0"}
    done = subprocess.run(["bash", str(repo / "bench" / "h200_domino_relations.sh"), "train-bench"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2 and "BASE_ONLY=1 trains DFlash and sends it back: set SEND_DRAFTERS=1" in done.stderr
    assert not (tmp_path / "w2" / "trained.log").exists()


def _packed_drafter(repo: pathlib.Path, tmp_path: pathlib.Path, name: str) -> tuple[pathlib.Path, bytes]:
    """A dflash/drafter of random bytes packed by bench/parts.sh, as an earlier session sends one back."""
    root = tmp_path / f"{name}_src"
    (root / "dflash/drafter").mkdir(parents=True)
    weights = os.urandom(4096)
    (root / "dflash/drafter/model.safetensors").write_bytes(weights)
    done = subprocess.run(["bash", str(repo / "bench" / "parts.sh"), "pack", str(root), str(tmp_path / name),
                           "dflash/drafter"], capture_output=True, text=True, env={**os.environ, "PART_SIZE": "1K"})
    assert done.returncode == 0, done.stderr
    return tmp_path / name, weights


def test_a_head_rate_sweep_on_a_carried_fork_trains_only_the_heads_and_benches_each(repo, tmp_path):
    """The fork of session 56 carried in whole (docs/training.md, session 57): its base (INIT_FROM, TRAIN_DFLASH=0)
    and its DFlash continued (FAIR_FROM), so that only the Domino branch trains, once per rate of HEAD_LR_SCALES,
    each from the carried base; the bench with vanilla takes the best held-out walk, the other rate gets its own
    bench against the carried DFlash."""
    base, base_weights = _packed_drafter(repo, tmp_path, "drafters_dflash")
    fair, fair_weights = _packed_drafter(repo, tmp_path, "drafters_fair")
    work, results = tmp_path / "w", tmp_path / "r"
    steps, out = _train_bench(repo, work, results, STEPS="600", DOMINO_STEPS="400", DOMINO_ON_DFLASH="1",
                              LABELS="target", HEAD_LR_SCALES="6,12", TRAIN_DFLASH="0", INIT_FROM=str(base),
                              FAIR_FROM=str(fair), SEND_DRAFTERS="0", SEND_FAIR="0")
    run = "domino_tf_curriculum_floor_soft"
    assert (work / "trained.log").read_text().splitlines() == [
        f"domino dflash tf_curriculum_floor_soft labels=target head_lr={rate}" for rate in (6, 12)]
    trains = [s for s in steps if "issue5 domino" in s]
    assert all(f"INIT_FROM= INIT_LAYERS= INIT_BACKBONE={work}/dflash/drafter" in s for s in trains)
    assert [re.search(r"DOMINO_NAME=(\S+)", s).group(1) for s in trains] == [f"{run}_lr6", f"{run}_lr12"]
    assert (work / "dflash/drafter/model.safetensors").read_bytes() == base_weights
    assert (work / "dflash_fair/drafter/model.safetensors").read_bytes() == fair_weights
    assert f"bench takes {run}_lr12" in out  # the stub walks a faster head higher
    assert (work / "benched.log").read_text().splitlines() == [
        f"bench dflash_fair {run}_lr12 vanilla,dflash,domino_block_stop bench5_t0",
        f"bench dflash_fair {run}_lr6 dflash,domino_block_stop bench5_{run}_lr6"]


def test_a_carried_baseline_may_arrive_while_domino_trains(repo, tmp_path):
    """FAIR_FROM's parts travel in device calls while the job runs: the benches wait for their SHA256SUM (the last
    file carried), and after FAIR_WAIT seconds without it the job stops, naming the folder."""
    base, _ = _packed_drafter(repo, tmp_path, "drafters_dflash")
    fair, fair_weights = _packed_drafter(repo, tmp_path, "drafters_fair")
    arriving = tmp_path / "arriving"
    arriving.mkdir()
    for part in fair.glob("part-*"):
        shutil.copy(part, arriving / part.name)
    env = {**os.environ, **COMMON, "WORK": str(tmp_path / "w"), "RESULTS": str(tmp_path / "r"), "PART_SIZE": "64K",
           "STEPS": "600", "DOMINO_STEPS": "400", "DOMINO_ON_DFLASH": "1", "TRAIN_DFLASH": "0",
           "INIT_FROM": str(base), "FAIR_FROM": str(arriving), "SEND_DRAFTERS": "0", "SEND_FAIR": "0", "BENCH": "0"}
    script = str(repo / "bench" / "h200_domino_relations.sh")
    late = subprocess.run(["bash", script, "train-bench"], capture_output=True, text=True,
                          env={**env, "FAIR_WAIT": "0"})
    assert late.returncode == 2 and f"FAIR_FROM: no {arriving}/SHA256SUM after 0 s" in late.stderr
    work = tmp_path / "w2"
    job = subprocess.Popen(["bash", script, "train-bench"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**env, "WORK": str(work)})
    while not (work / "trained.log").exists() and job.poll() is None:  # Domino has trained: the wait begins
        time.sleep(0.2)
    time.sleep(1)
    assert job.poll() is None and not (work / "dflash_fair").exists()
    shutil.copy(fair / "SHA256SUM", arriving / "SHA256SUM")
    stdout, stderr = job.communicate(timeout=60)
    assert job.returncode == 0, stdout + stderr
    assert (work / "dflash_fair/drafter/model.safetensors").read_bytes() == fair_weights


@pytest.mark.parametrize("extra, message", [
    ({"HEAD_LR_SCALES": "6,12", "HEAD_LR_SCALE": "3"}, "HEAD_LR_SCALES=6,12 trains one run per head rate"),
    ({"FAIR_FROM": "/nowhere", "FAIR_DFLASH_STEPS": "400"}, "FAIR_FROM carries in the DFlash drafter")])
def test_conflicting_baseline_or_rate_settings_stop_before_anything_runs(repo, tmp_path, extra, message):
    env = {**os.environ, **COMMON, "WORK": str(tmp_path / "w"), "RESULTS": str(tmp_path / "r"), "STEPS": "600",
           **extra}
    done = subprocess.run(["bash", str(repo / "bench" / "h200_domino_relations.sh"), "train-bench"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "w" / "trained.log").exists()
