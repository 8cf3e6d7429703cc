"""Method options given as flags: each applies to some methods only, and a flag given to another method is a
one-line error before anything heavy is loaded. Also the flags that `generate` and `bench` share."""

from jspec.cli.args import positive_int
from jspec.errors import UserError


def budget_option(method: str, budget: int) -> dict:
    """--budget sizes the tree of the methods whose tree is a budget (token_recycling, graft, eagle3_pruned); the
    others are fixed."""
    return {"budget": budget} if method in ("token_recycling", "graft", "eagle3_pruned") else {}


def fixed_split_option(method: str, fixed_split: int | None) -> dict:
    if fixed_split is None:
        return {}
    if method != "graft":
        raise UserError("--fixed-split applies to --method graft only")
    return {"fixed_split": fixed_split}


def tr_tree_option(path: str | None) -> dict:
    """token_recycling's `tree` (and the `budget` it sets) from a --tr-tree file."""
    if path is None:
        return {}
    from jspec.retrieval.templates import read_tree

    tree = read_tree(path)
    return {"tree": tree, "budget": len(tree) + 1}


def candidates_option(method: str, candidates: int | None, chunk: int | None = None) -> dict:
    if chunk is not None and candidates is None:
        raise UserError("--candidate-chunk approximates Domino's candidates: it needs --candidates")
    if candidates is None:
        return {}
    if method not in ("domino", "graft_tail"):
        raise UserError("--candidates applies to --method domino and graft_tail only")
    return {"candidates": candidates, **({"candidate_chunk": chunk} if chunk else {})}


def draft_model_options(method: str, confidence: float | None, top_k: int | None) -> dict:
    options = {k: v for k, v in (("min_confidence", confidence), ("top_k", top_k)) if v is not None}
    if options and method != "draft_model":
        raise UserError("--draft-confidence and --draft-top-k apply to --method draft_model only")
    return options


def tail_options(methods: tuple[str, ...], args) -> dict:
    options = {k: v for k, v in (("threshold", args.tail_threshold), ("tail", args.tail)) if v is not None}
    if options and "graft_tail" not in methods:
        raise UserError("--tail-threshold and --tail apply to the graft_tail method only")
    return options


def drafter_placeholder(method: str) -> dict:
    return {"drafter": None} if method == "draft_model" else {}


def add_domino_arguments(parser, who: str, candidates: int | None) -> None:
    """--candidates, --candidate-chunk and --full-block, for `who` (the methods or bench labels they apply to)."""
    default = "the full vocabulary" if candidates is None else candidates
    parser.add_argument("--candidates", type=positive_int("--candidates"), default=candidates, metavar="K",
                        help=f"{who}: correct only the K highest base logits of each draft row (default: {default})")
    parser.add_argument("--candidate-chunk", type=positive_int("--candidate-chunk"), default=None, metavar="C",
                        help=f"{who}: approximate candidates, the best token of each of the K chunks of C tokens with "
                        "the highest maxima (one sort instead of two; other drafts, the same output)")
    parser.add_argument("--full-block", action="store_true",
                        help="block drafters with a shift_label (Domino) checkpoint: also draft the block's last row, "
                        "for the official B + 1 verify chain (default: B, the paper's 16-token budget)")
    parser.add_argument("--head-drafts", type=positive_int("--head-drafts"), default=None, metavar="M",
                        help="Domino: only the first M drafts of a block go through the correction head (its GRU runs "
                        "M - 1 sequential steps); later drafts take the base argmax (default: all)")


def add_tail_arguments(parser) -> None:
    parser.add_argument("--tail-threshold", type=float, default=None, metavar="P",
                        help="graft_tail: keep the block's drafts while their cumulative confidence stays >= P")
    parser.add_argument("--tail", choices=("chain", "tree"), default=None,
                        help="graft_tail: retrieve the tail as a rank-0 chain or the 2.2.2 tree")
