"""tensortier.torch: an unmodified PyTorch training loop's CPU tensors on tiers.

    import tensortier.torch as tt
    rt = tt.Runtime("fast=dram:4GiB,slow=emulated:optane-server:8GiB", policy="sentinel", fast_budget="20%")
    model, optimizer = make_model(), make_optimizer()   # created after: their tensors are objects
    rt.attach(model, optimizer)
    for x, y in batches:
        with rt.step():
            optimizer.zero_grad(); loss = loss_fn(model(x), y); loss.backward(); optimizer.step()

While a Runtime is open, every CPU tensor PyTorch allocates is a runtime object (PyTorch's CPU
allocator is the runtime's). Layers come from PyTorch itself: each leaf module's forward is a layer
(its forward hooks), its backward a layer from the moment the gradient of its output is computed
(a hook on that tensor) to the next such moment, and the optimizer's zero_grad and step are layers.
Each layer declares what it knows it touches: a forward its inputs, parameters and buffers (and its
inputs as written where the module works in place); a backward its forward's inputs and outputs,
its parameters and their gradients; the optimizer its parameters, gradients and state. Anything a
layer touches undeclared (functional code between modules, autograd's own buffers) is seen by the
profile's page protection and left where it was born by every plan, so it is never moved under a
running kernel. Moves keep every tensor's address (the runtime moves in place: PyTorch holds raw
pointers). Not thread-safe: one training thread marks steps.
"""

import contextlib
import warnings

import torch

from . import _torch

__all__ = ["Runtime"]


def _storage_ptr(t):
    """The address of the object behind a tensor's storage (a view shares its base's). From the
    tensor's own pointer and offset where it is strided: t.storage() makes a Python object at every
    call (a fifth of the hooks' time on ResNet-18)."""
    if t.layout == torch.strided:
        return t.data_ptr() - t.storage_offset() * t.element_size()
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().data_ptr()
    return t.storage().data_ptr()


def _tensors(value):
    """The tensors in a module's inputs or outputs (nested tuples, lists and dicts)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _plain_allreduce(state, bucket):
    """A DDP comm hook: the bucket's mean over the ranks, all-reduced in plain memory."""
    import torch.distributed as dist

    _torch.plain_begin()
    try:
        flat = bucket.buffer().clone()
    finally:
        _torch.plain_end()
    flat.div_(dist.get_world_size())  # before the sum, as DDP's own all-reduce: the same bits
    return dist.all_reduce(flat, async_op=True).get_future().then(lambda f: f.value()[0])


def _ptrs(tensors):
    return [_storage_ptr(t) for t in tensors if t.is_cpu]


def _own(tensors):
    """A module's own parameters or buffers from its dict (module._parameters, ._buffers):
    parameters(recurse=False) costs 5x as much a call, at every layer."""
    return [t for t in tensors.values() if t is not None]


class Runtime:
    """The runtime under PyTorch's CPU allocator, from creation until close().

    tiers: a tier spec (docs/TIERS.md), fastest first. policy: a migration policy
    (docs/POLICIES.md; "" for none: objects stay where they are born). fast_budget: the fast tier's
    budget under the policy ("20%" of the profiled peak, or a size). profile_step: the step to
    profile (default: the runtime's, step 1). chaos_moves: for tests, that many objects drawn at
    random moved to another tier at every layer boundary (with no policy). options: RuntimeOptions by name (dead_moves,
    short_lived_arena, trial_steps, room_wait_ms, timed_bound_s; runtime.h says what each does)."""

    def __init__(self, tiers, policy="", fast_budget="", profile_step=None, chaos_moves=0, **options):
        self._rt = _torch.Runtime(tiers, policy, fast_budget, -1 if profile_step is None else profile_step, options)
        self._chaos_moves = chaos_moves  # for tests: random objects moved at each layer boundary
        self._in_step = False
        self._open = None  # the name of the layer begun and not ended
        self._forward = {}  # module -> object ids of its inputs and outputs in this step's forward
        self._handles = []

    # -- marks ---------------------------------------------------------------------------------
    def _begin(self, name, reads, writes):
        self._end()
        if self._chaos_moves:
            self.chaos_moved = getattr(self, "chaos_moved", 0) + self._rt.move_random(self._chaos_moves)
        self._rt.layer_begin(name, reads, writes)
        self._open = name

    def _end(self):
        if self._open is not None:
            self._open = None
            self._rt.layer_end()

    @contextlib.contextmanager
    def step(self):
        """One training iteration: forward, backward and the optimizer's step inside."""
        if self._in_step:
            raise RuntimeError("tensortier: rt.step() inside rt.step() (steps do not nest)")
        self._rt.step_begin()
        self._in_step = True
        try:
            yield self
        finally:
            self._end()
            self._in_step = False
            self._forward.clear()
            self._rt.step_end()

    # -- hooks -----------------------------------------------------------------------------------
    def attach(self, model, optimizer=None):
        """Marks each leaf module of `model` (and `optimizer`'s zero_grad and step) as layers."""
        if any(p.device.type != "cpu" for p in model.parameters()):
            warnings.warn("tensortier: the model's tensors on other devices than the CPU are left to PyTorch "
                          "(only CPU tensors are objects on the tiers)", stacklevel=2)
        for name, module in model.named_modules():
            if next(module.children(), None) is not None:
                continue
            name = name or type(module).__name__
            self._handles.append(module.register_forward_pre_hook(self._forward_begin(name)))
            self._handles.append(module.register_forward_hook(self._forward_end(name)))
        if optimizer is not None:
            self._wrap_optimizer(optimizer)
        return self

    def _forward_begin(self, name):
        def hook(module, inputs):
            if not self._in_step:
                return
            ins = _ptrs(_tensors(inputs))
            buffers = _ptrs(_own(module._buffers))
            writes = buffers + ins if getattr(module, "inplace", False) else buffers
            self._begin(name + ".fwd", ins + _ptrs(_own(module._parameters)) + buffers, writes)
            self._forward[module] = self._rt.ids_of(ins)

        return hook

    def _forward_end(self, name):
        def hook(module, inputs, output):
            if not self._in_step:
                return
            self._end()
            outs = list(_tensors(output))
            self._forward[module] = self._forward.get(module, []) + self._rt.ids_of(_ptrs(outs))
            for t in outs:
                if t.requires_grad and t.grad_fn is not None:
                    t.register_hook(self._backward_begin(name, module))

        return hook

    def _backward_begin(self, name, module):
        def hook(grad):
            if not self._in_step:
                return None
            params = _own(module._parameters)
            grads = [p.grad for p in params if p.grad is not None]
            # Its forward's tensors by object id, those alive now (one freed since, e.g. an output
            # a later add consumed, may have left its address to another object).
            saved = self._rt.live_addresses(self._forward.get(module, []))
            self._begin(name + ".bwd", saved + _ptrs(params) + _ptrs([grad]) + _ptrs(grads), _ptrs(grads))
            return None

        return hook

    def _wrap_optimizer(self, optimizer):
        step, zero_grad = optimizer.step, optimizer.zero_grad

        def params():
            return [p for g in optimizer.param_groups for p in g["params"]]

        def state():
            return [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]

        def wrapped_zero_grad(*args, **kwargs):
            if not self._in_step:
                return zero_grad(*args, **kwargs)
            grads = _ptrs([p.grad for p in params() if p.grad is not None])
            self._begin("optimizer.zero_grad", grads, grads)
            try:
                return zero_grad(*args, **kwargs)
            finally:
                self._end()

        def wrapped_step(*args, **kwargs):
            if not self._in_step:
                return step(*args, **kwargs)
            ps = params()
            grads = _ptrs([p.grad for p in ps if p.grad is not None])
            mine = _ptrs(ps) + _ptrs(state())
            self._begin("optimizer.step", mine + grads, mine)
            try:
                return step(*args, **kwargs)
            finally:
                self._end()

        optimizer.zero_grad, optimizer.step = wrapped_zero_grad, wrapped_step

    # -- DDP ---------------------------------------------------------------------------------------
    @staticmethod
    @contextlib.contextmanager
    def plain():
        """Tensors this thread allocates inside are plain memory, not objects (never profiled or moved)."""
        _torch.plain_begin()
        try:
            yield
        finally:
            _torch.plain_end()

    def ddp(self, model, **kwargs):
        """DistributedDataParallel(model, **kwargs) whose communication never touches an object.

        gloo sends and receives with system calls, which fail (EFAULT) on the pages a profile
        protects. So the module's buffers (broadcast at each forward) move to plain memory before
        DDP sees them, and each gradient bucket is all-reduced in a plain copy (a comm hook: one
        copy of the gradients a step more; divided by the ranks before the sum, as DDP's own, so the
        results are DDP's to the bit); the reducer copies the result into the gradients."""
        from torch.nn.parallel import DistributedDataParallel

        with self.plain():
            for module in model.modules():
                for name, buf in module._buffers.items():
                    if buf is not None:
                        module._buffers[name] = buf.detach().clone()
        ddp = DistributedDataParallel(model, **kwargs)
        ddp.register_comm_hook(None, _plain_allreduce)
        return ddp

    # -- what it did -----------------------------------------------------------------------------
    def stats(self):
        """Counts of the run so far: steps, live objects and bytes, moves, bytes in and out,
        emulated charge, and per tier its live bytes."""
        return self._rt.stats()

    def describe(self):
        """The tiers (and the policy's failure or trial, where there is one), for people."""
        return self._rt.describe()

    def trace(self, first_step, steps):
        """Records `steps` steps from `first_step` on (layers, waits, moves) for write_trace."""
        self._rt.trace(first_step, steps)

    def write_trace(self, path):
        """Writes the recorded steps as a Chrome trace (ui.perfetto.dev, tools/plot_timeline.py)."""
        self._rt.write_trace(path)

    def tier_of(self, tensor):
        """The tier (0: fastest) the tensor's storage is on now."""
        return self._rt.tier_of(_storage_ptr(tensor))

    def close(self):
        """Gives PyTorch its own CPU allocator back; tensors made before stay objects until freed."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._rt.close()
