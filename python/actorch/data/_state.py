"""actorch.DataLoader's state_dict() and load_state_dict(): what an epoch records, what a state
holds, how one is checked, and how the rest of an epoch is drawn again from it.

# Note [Loader state from Python]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The C++ loader's state (data_loader::state(), through _Loader._state()) is exact for what it
# owns: the epoch, the batch indices delivered, the number of streams of an iterable dataset,
# and its generators at the start of the epoch. What the C++ loader does not own, a state
# records beside it, at iter(), just after the epoch's base seed is drawn (torch's order of
# draws):
# - the base seed itself (worker i's seed is base_seed + i), given back through
#   _seed_next_epoch, so the resumed epoch's workers are seeded as the first run's were;
# - the states of the torch generators a Python sampler may draw from (torch's default
#   generator, the loader's `generator`, the sampler's and the batch sampler's sampler's own) and
#   the samplers' own state_dict() where they have one. The C++ loader lists a Python sampler's
#   whole epoch when iter() plans it, so on resume those generators are set back, the sampler
#   is listed again (the same order, torch's RandomSampler included), the generators are
#   restored, and a loader over that list resumes with the same delivered batch indices;
# - with torch's DistributedSampler, which global positions of the epoch's order this rank has
#   consumed (rank r's j-th sample is position r + W*j of the padded order, as in
#   DistributedSampler.__iter__), as runs [start, step, count].
# Another world size needs every rank's state (a list, gathered as the user likes: each rank
# saves its own and the resumed job loads all files, or rank 0 gathers them with
# all_gather_object): the positions below the dataset's length that no rank consumed are the
# rest of the epoch, padded by wrapping (or cut, with drop_last) to a multiple of the new world
# and dealt [rank::W'], as DistributedSampler deals. Every sample is then seen once in the
# epoch apart from the padding of either world; the epochs after it are the new world's own.
# A rank's single state resumes only in the same rank of the same world.
# Another num_workers resumes where a batch does not depend on the worker that loaded it:
# actorch's C++ datasets always, a Python map-style dataset when the user says it draws
# nothing from per-worker generators (per_worker_rng=False). An iterable dataset's streams are
# the workers', so it needs the same num_workers. A worker's own generators restart from its
# seed at resume (torch, random and numpy), not where they stood.
# Generators: listing the epoch again leaves the loader's and the samplers' own generators
# where listing it left them in the first run, so the epochs after the resumed one are the
# first run's too; torch's default generator is the program's, and is left as it was (so the
# next epochs' shuffles are drawn from wherever the resumed program has it, as any epoch's).
# Between epochs a state holds the own generators as they stand, and loading it sets them.
"""
import copy

try:
    import torch as _torch
except ImportError:
    _torch = None

MARKER = "actorch_loader_state"


class EpochRecord:
    """What iter() recorded of an epoch: the loader running it and its iterator (a weak
    reference), what Note [Loader state from Python] lists, and for a resumed DistributedSampler
    epoch the positions this rank was dealt (`share`) and those consumed before (`prior`)."""
    __slots__ = ("loader", "iterator", "base_seed", "generators", "sampler_states", "share",
                 "prior", "sampler_epoch", "resumed")

    def __init__(self):
        self.loader = self.iterator = self.base_seed = self.generators = None
        self.sampler_states = self.share = self.sampler_epoch = None
        self.prior = ()
        self.resumed = False


def runs(positions):
    """Sorted positions as runs [start, step, count]: one run for r + W*j, j < k."""
    out = []
    for p in sorted(set(positions)):
        if out and out[-1][2] == 1:
            out[-1][1], out[-1][2] = p - out[-1][0], 2
        elif out and p == out[-1][0] + out[-1][1] * out[-1][2]:
            out[-1][2] += 1
        else:
            out.append([p, 1, 1])
    return out


def positions(run_list):
    return [start + step * i for start, step, count in run_list for i in range(count)]


def is_distributed(sampler):
    return _torch is not None and isinstance(sampler, _torch.utils.data.DistributedSampler)


def generator_states(loader):
    """The torch generators a Python sampler of `loader` may draw from, by name."""
    if _torch is None:
        return None
    out = {"default": _torch.get_rng_state()}
    for name, gen in _generators(loader).items():
        out[name] = gen.get_state()
    return out


def _generators(loader):
    found = {"loader": loader.generator,
             "sampler": getattr(loader._py_sampler, "generator", None),
             "batch_sampler": getattr(getattr(loader._py_batch_sampler, "sampler", None),
                                      "generator", None)}
    return {k: g for k, g in found.items() if isinstance(g, _torch.Generator)}


def sampler_states(loader):
    out = {}
    for name in ("sampler", "batch_sampler"):
        s = getattr(loader, "_py_" + name)
        if callable(getattr(s, "state_dict", None)):
            out[name] = s.state_dict()
    return out


def set_generators(loader, saved):
    """Sets `loader`'s own torch generators (not torch's default one) to the states saved."""
    if _torch is None or not saved:
        return
    for name, g in _generators(loader).items():
        if name in saved:
            g.set_state(saved[name])


def redraw(loader, state):
    """The saved epoch's order from loader's Python sampler (or batch sampler), drawn again
    from the generator states the state recorded: torch's default generator is left as it was,
    the own ones where listing left them."""
    saved = state["generators"] or {}
    default = _torch.get_rng_state() if _torch is not None else None
    try:
        if "default" in saved:
            _torch.set_rng_state(saved["default"])
        set_generators(loader, saved)
        for name, s in (state["sampler_states"] or {}).items():
            getattr(loader, "_py_" + name).load_state_dict(s)
        if loader._py_batch_sampler is not None:
            return [list(b) for b in loader._py_batch_sampler]
        return list(loader._py_sampler)
    finally:
        if default is not None:
            _torch.set_rng_state(default)


def distributed_part(sampler, record, delivered, batch_size):
    """A DistributedSampler rank's part of a state: its world and epoch, the dataset's length,
    the positions it was dealt (r + W*j, or a resumed epoch's share) and those consumed, its
    own and before."""
    resumed = record is not None and record.share is not None
    mine = record.share if resumed else range(sampler.rank, sampler.total_size,
                                              sampler.num_replicas)
    consumed = set(record.prior if record is not None else ())
    per_batch = batch_size or 1
    for b in delivered:
        consumed.update(mine[b * per_batch:(b + 1) * per_batch])
    epoch = record.sampler_epoch if record is not None and record.sampler_epoch is not None \
        else sampler.epoch
    return {"num_replicas": sampler.num_replicas, "rank": sampler.rank, "epoch": epoch,
            "samples": len(sampler.dataset), "share": runs(mine), "consumed": runs(consumed)}


def _fail(message):
    raise ValueError("DataLoader.load_state_dict: " + message)


def check(loader, state):
    """`state` (one state, or a list of every rank's) checked against `loader`; returns what
    __iter__ resumes from. ValueError naming what does not match."""
    if isinstance(state, (list, tuple)):
        if not state:
            _fail("an empty list of states")
        states = list(state)
    else:
        states = [state]
    for s in states:
        if not isinstance(s, dict) or s.get(MARKER) != 1:
            _fail(f"not a state of actorch.DataLoader (no {MARKER!r} key of version 1); "
                  "pass what DataLoader.state_dict() returned")
    distributed = is_distributed(loader.sampler)
    if isinstance(state, (list, tuple)) and not distributed:
        _fail(f"a list of {len(states)} states is for a loader over torch's "
                  "DistributedSampler (every rank's state, to resume at another world size); "
                  f"this loader's sampler is {type(loader.sampler).__name__}")
    first = states[0]
    length = loader._length_or_none()
    for key, have in (("iterable", loader._iterable), ("batch_size", loader.batch_size),
                      ("length", length)):
        if key == "length" and (distributed or have is None or first[key] is None):
            continue
        if first[key] != have:
            _fail(f"the state is of a loader with {key}={first[key]}, this one has "
                  f"{key}={have}")
    mid_epoch = [bool(s["in_epoch"]) for s in states]
    if any(s["cxx"][1] for s in states) and first["num_workers"] != loader.num_workers:
        was, now = first["num_workers"], loader.num_workers
        if loader._iterable:
            _fail(f"saved with num_workers={was} in the middle of an epoch of an "
                  f"IterableDataset, loaded with num_workers={now}: each worker iterates its "
                  "own stream, so resume with the same num_workers")
        if first["per_worker_rng"] or loader._per_worker_rng:
            _fail(f"saved with num_workers={was} in the middle of an epoch, loaded with "
                  f"num_workers={now}: a Python dataset may draw from per-worker generators "
                  "(seeded base_seed + worker id), so its batches depend on the worker; if "
                  "yours draws nothing from them, build both loaders with per_worker_rng=False")
    resume = {"state": state, "first": first, "mid_epoch": any(mid_epoch), "all_ranks": None}
    if distributed:
        resume["all_ranks"] = _check_distributed(loader.sampler, states, mid_epoch,
                                                 isinstance(state, (list, tuple)))
    return resume


def _check_distributed(sampler, states, mid_epoch, is_list):
    parts = [s.get("distributed") for s in states]
    if any(p is None for p in parts):
        _fail("a state without a DistributedSampler's part, for a loader over torch's "
              "DistributedSampler")
    if len(set(mid_epoch)) > 1:
        _fail("some ranks' states are in the middle of an epoch and some between epochs; "
              "save every rank's state at the same step")
    if len({p["epoch"] for p in parts}) > 1:
        _fail(f"the states are of epochs {sorted({p['epoch'] for p in parts})}; save every "
              "rank's state in the same epoch")
    n = len(sampler.dataset)
    if any(p["samples"] != n for p in parts):
        _fail(f"the states are of a dataset of {parts[0]['samples']} samples, this "
              f"DistributedSampler's has {n}")
    if not is_list:
        p = parts[0]
        if mid_epoch[0] and (p["rank"] != sampler.rank or
                             p["num_replicas"] != sampler.num_replicas):
            _fail(f"the state of rank {p['rank']} of {p['num_replicas']} resumes only that "
                  f"rank of that world (this is rank {sampler.rank} of "
                  f"{sampler.num_replicas}); to resume at another world size or rank, pass "
                  "the list of every rank's states")
        return False
    world = parts[0]["num_replicas"]
    if sorted(p["rank"] for p in parts) != list(range(world)) or any(
            p["num_replicas"] != world for p in parts):
        got = [(p["rank"], p["num_replicas"]) for p in parts]
        _fail(f"expected the states of ranks 0..{world - 1} of one world of {world}, got "
              f"(rank, world) {got}")
    return True


def epoch_order(sampler, epoch):
    """The whole epoch's order of `sampler`'s kind as one rank of one (no padding): position p
    of the padded order of any world is order[p % n]."""
    one = copy.copy(sampler)
    n = len(sampler.dataset)
    one.num_replicas, one.rank, one.drop_last, one.epoch = 1, 0, False, epoch
    one.num_samples = one.total_size = n
    return list(one)


def distributed_share(sampler, resume):
    """(this rank's positions of the rest of the saved epoch, those consumed before it)."""
    states = resume["state"] if resume["all_ranks"] else [resume["first"]]
    consumed = set()
    for s in states:
        consumed.update(positions(s["distributed"]["consumed"]))
    if not resume["all_ranks"]:
        mine = positions(resume["first"]["distributed"]["share"])
        return [p for p in mine if p not in consumed], sorted(consumed)
    n = states[0]["distributed"]["samples"]
    rest = [p for p in range(n) if p not in consumed]
    world = sampler.num_replicas
    if sampler.drop_last:
        rest = rest[:len(rest) // world * world]
    elif rest and len(rest) % world:
        pad = world - len(rest) % world
        rest += (rest * -(-pad // len(rest)))[:pad]
    return rest[sampler.rank::world], sorted(consumed)
