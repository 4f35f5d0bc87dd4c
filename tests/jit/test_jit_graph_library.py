"""PyTorch Geometric (``torch_geometric``) layers and models under jitcore, as its users call them.

Message passing gathers node features by edge index, scatters them back (``scatter_reduce``,
``index_add``), adds self loops and computes degrees and per-edge softmax; a model's training step
runs its backward and optimizer step inside the jitted function. Each program is compared with
eager over calls on graphs of the same sizes and of new ones.
"""

from __future__ import annotations

import pytest
import torch
from jit_helpers import assert_same, training_step

# torch_geometric replaces torch.index_select and torch.select with wrappers of its own when imported
# (for its HashTensor); the rest of the suite, run in the same worker, compares with torch's own.
_TORCH_OWN = {"index_select": torch.index_select, "select": torch.select}
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv, global_mean_pool  # noqa: E402
from torch_geometric.utils import add_self_loops, degree, scatter  # noqa: E402

for _name, _fn in _TORCH_OWN.items():
    setattr(torch, _name, _fn)

import jitcore  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore")
FEATURES = 4


def _graph(seed: int, nodes: int = 6, edges: int = 10):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(nodes, FEATURES, generator=g)
    edge_index = torch.randint(0, nodes, (2, edges), generator=g)
    batch = torch.arange(nodes) * 2 // nodes
    return x, edge_index, batch


LAYERS = {
    "gcn": lambda: GCNConv(FEATURES, 8),
    "gat": lambda: GATConv(FEATURES, 8, heads=2),
    "sage": lambda: SAGEConv(FEATURES, 8),
    "gin": lambda: GINConv(torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.ReLU(),
                                               torch.nn.Linear(8, 8))),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_message_passing_layers(name):
    torch.manual_seed(0)
    layer = LAYERS[name]().eval()
    jitted = jitcore.jit(layer)
    for seed, nodes, edges in [(0, 6, 10), (1, 6, 10), (2, 9, 14)]:
        x, edge_index, _ = _graph(seed, nodes, edges)
        with torch.no_grad():
            assert_same(jitted(x, edge_index), layer(x, edge_index))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_scatter_degree_and_self_loops(reduce):
    def f(x, edge_index):
        loops, _ = add_self_loops(edge_index, num_nodes=x.size(0))
        deg = degree(loops[0], x.size(0))
        return scatter(x[loops[0]], loops[1], dim=0, dim_size=x.size(0), reduce=reduce) / deg[:, None]

    jf = jitcore.jit(f)
    for seed in range(3):
        x, edge_index, _ = _graph(seed)
        assert_same(jf(x, edge_index), f(x, edge_index))


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GCNConv(FEATURES, 8)
        self.conv2 = GCNConv(8, 3)

    def forward(self, x, edge_index, batch):
        h = self.conv1(x, edge_index).relu()
        return global_mean_pool(self.conv2(h, edge_index), batch)


def test_training_step_inside_the_jitted_function():
    def setup():
        torch.manual_seed(0)
        net = _Net()
        return net, torch.optim.Adam(net.parameters(), lr=0.01)

    step = training_step(lambda net, x, edge_index, batch, target:
                         torch.nn.functional.cross_entropy(net(x, edge_index, batch), target))

    eager_net, eager_opt = setup()
    net, opt = setup()
    jitted = jitcore.jit(step)
    target = torch.tensor([0, 2])
    for seed in range(4):
        x, edge_index, batch = _graph(seed)
        assert_same(jitted(net, opt, x, edge_index, batch, target),
                    step(eager_net, eager_opt, x, edge_index, batch, target))
        for p, q in zip(net.parameters(), eager_net.parameters()):
            assert_same(p.detach(), q.detach())


def test_cloned_data_objects_made_anew_per_call_are_one_entry():
    """``Data.clone()``/``copy.copy(data)`` copy the storage's ``__dict__`` (its ``_parent``, a weak
    reference to the Data) and then read ``data._store``: the storage was reached two ways and the
    weak reference held by identity, so a new Data per call (a DataLoader's) was an entry per call.
    Now the weak reference is guarded by what it refers to (jitcore/jit/provenance.py)."""
    import copy

    from torch_geometric.data import Data

    def through_clone(data):
        out = data.clone()
        out.x = out.x * 2
        return out.x + data.x, out.num_nodes

    def through_copy(data):
        return copy.copy(data).x.sum(0) + data.edge_index.shape[1]

    for fn in (through_clone, through_copy):
        jf = jitcore.jit(fn)
        for seed in range(3):
            x, edge_index, _ = _graph(seed)
            assert_same(jf(Data(x=x, edge_index=edge_index)), fn(Data(x=x, edge_index=edge_index)))
        assert (jitcore.cache_misses(jf), jitcore.cache_hits(jf)) == (1, 2)
