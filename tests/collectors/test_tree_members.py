"""The server tree's listing kept between host polls (collectors.tree_members): listed again
only when a member is gone, a main thread has a child the listing lacks, the root changes,
or RELIST_S have passed; over a backend whose processes the test moves by hand."""

from __future__ import annotations

from collectors import tree_members
from collectors.tree_members import TreeMembers


class Procs:
    """parent -> children as a kernel would say them; thread_children None where it would
    not (a kernel without the children file)."""

    def __init__(self, tree: dict[int, list[int]], children_file: bool = True) -> None:
        self.tree = tree
        self.children_file = children_file

    def children(self, pid: int) -> list[int] | None:
        if pid not in self.tree:
            return None
        out, todo = [], list(self.tree[pid])
        while todo:
            kid = todo.pop(0)
            out.append(kid)
            todo += self.tree.get(kid, [])
        return out

    def thread_children(self, pid: int) -> list[int] | None:
        if not self.children_file or pid not in self.tree:
            return None
        return list(self.tree[pid])


def test_the_listing_is_kept_until_something_says_it_changed() -> None:
    now = [0.0]
    procs = Procs({1: [2, 3], 2: [], 3: [4], 4: []})
    members = TreeMembers(clock=lambda: now[0])
    assert members.get(procs, 1) == [1, 2, 3, 4] and members.listings == 1
    for t in range(1, 9):  # a steady tree: no listing for several polls
        now[0] = float(t)
        assert members.get(procs, 1) == [1, 2, 3, 4]
    assert members.listings == 1
    procs.tree[3].append(5)  # a rank spawns a worker: its main thread's children say so
    procs.tree[5] = []
    assert members.get(procs, 1) == [1, 2, 3, 4, 5] and members.listings == 2
    members.gone()  # a member's status read failed
    del procs.tree[4]
    procs.tree[3].remove(4)
    assert members.get(procs, 1) == [1, 2, 3, 5] and members.listings == 3
    assert members.get(procs, 2) == [2] and members.listings == 4  # another root
    del procs.tree[2]
    members.gone()
    assert members.get(procs, 2) is None  # the root is gone


def test_without_the_children_file_it_lists_again_every_relist_s() -> None:
    now = [0.0]
    procs = Procs({1: [2], 2: []}, children_file=False)
    members = TreeMembers(clock=lambda: now[0])
    assert members.get(procs, 1) == [1, 2]
    procs.tree[1].append(3)  # unseen: no children file to say so
    procs.tree[3] = []
    now[0] = tree_members.RELIST_S - 0.5
    assert members.get(procs, 1) == [1, 2] and members.listings == 1
    now[0] = tree_members.RELIST_S
    assert members.get(procs, 1) == [1, 2, 3] and members.listings == 2
