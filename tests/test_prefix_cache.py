"""clir_llm.prefix_cache: the block store (longest held prefix, least recently used out, the last blocks of a prompt
before its first), a serving engine's prefix cache simulated on a prompt stream, the prefixes a batch shares, the reuse
a schedule of prompts made of parts allows, and the layout of a batch over held prefixes of unequal length."""

import pytest
from clir_llm.core import ClirError
from clir_llm.prefix_cache import (
    BlockStore,
    block_hashes,
    prefix_hit_share,
    reuse_layout,
    segment_reuse,
    shared_prefixes,
    stage_levels,
    submit,
)


def test_block_hashes_name_the_whole_prefix():
    a, b = list(range(64)), [99] + list(range(1, 64))
    assert len(block_hashes(a)) == 4 and len(block_hashes(a[:47])) == 2
    assert block_hashes(a)[:2] == block_hashes(a[:40]) and all(x != y for x, y in zip(block_hashes(a), block_hashes(b)))
    assert block_hashes(list(range(16, 32)))[0] != block_hashes(a)[1]  # the same tokens after another prefix


def test_match_finds_the_longest_held_prefix_in_whole_blocks_up_to_a_limit():
    st = BlockStore(1e6)
    st.add(list(range(100)), lambda s, e: ((s, e), 1.0))
    n, payloads = st.match(list(range(70)) + [5] * 30)
    assert n == 64 and payloads == [(0, 16), (16, 32), (32, 48), (48, 64)]
    assert st.match(list(range(100)), limit=99)[0] == 96 and st.match(list(range(100)), limit=40)[0] == 32
    assert st.match([7] * 40)[0] == 0 and st.stats["hits"] == 3 and st.stats["lookups"] == 4
    before = dict(st.stats)
    assert st.match(list(range(50)), touch=False)[0] == 48 and st.stats == before  # a peek counts nothing


def test_least_recently_used_blocks_go_first_a_prompts_last_blocks_before_its_first():
    st = BlockStore(8 * 16)
    head = list(range(64))
    st.add(head + [1000 + i for i in range(64)])  # 8 blocks: full
    st.add(head + [2000 + i for i in range(64)])  # 4 new blocks push out the first prompt's last 4
    assert st.used <= st.capacity and st.stats["evicted"] == 4 and len(st) == 8
    assert st.match(head + [1000 + i for i in range(64)])[0] == 64  # the shared head stayed
    assert st.match(head + [2000 + i for i in range(64)])[0] == 128
    with pytest.raises(ClirError, match="block"):
        BlockStore(10, block=0)


def test_a_hash_collision_never_gives_another_prefix():
    st = BlockStore(1e6, block=2)
    st.add([1, 2, 3, 4])
    parent, blk, p, size = st._blocks[block_hashes([1, 2, 3, 4], 2)[1]]
    st._blocks[block_hashes([9, 9, 3, 4], 2)[1]] = (parent, blk, p, size)  # another prefix's name, forged
    assert st.match([9, 9, 3, 4, 5])[0] == 0


def test_a_serving_cache_simulated_on_a_stream():
    head = list(range(64))
    stream = [head + [1000 + 100 * i + j for j in range(64)] for i in range(10)]
    assert prefix_hit_share(stream, 1e6) == pytest.approx(9 * 64 / (10 * 128))
    # room for 3 blocks: the head's first 3 stay
    assert prefix_hit_share(stream, 48) == pytest.approx(9 * 48 / (10 * 128))
    assert prefix_hit_share(stream, 0) == 0.0 and prefix_hit_share([], 10) == 0.0
    st = BlockStore(1e6)
    # never the whole prompt: its last token is computed
    assert submit(st, list(range(32))) == 0 and submit(st, list(range(32))) == 16


def test_shared_prefixes_of_a_batch():
    s1, s2, s3 = list(range(100)), list(range(70)) + [7] * 30, list(range(40)) + [9] * 50
    assert [len(p) for p in shared_prefixes([s1, s2, s3], [0, 0, 0])] == [64]
    assert shared_prefixes([s1, s2, s3], [64, 64, 32]) == []  # held already
    assert shared_prefixes([s1, list(s1)], [0, 0]) == [tuple(range(96))]  # never a whole sequence
    assert shared_prefixes([s1], [0]) == [] and shared_prefixes([s1, s3], [0, 0], min_blocks=3) == []


def test_segment_reuse_of_prp_prompts():
    prp = lambda a, b: [("head", 50), (("A", a), 305), (("B", b), 320)]
    total, reused, held, reach = segment_reuse([prp("x", "y"), prp("y", "x"), prp("x", "z"), prp("x", "y")])
    assert (total, reused, held) == (4 * 675, 50 + 355 + 355, 355)  # a repeated prompt still computes its last part
    assert reach == 675  # x's parts are reused one prompt after their last use; the head right after
    assert segment_reuse([prp("x", "y"), prp("y", "x")])[3] == 0 and segment_reuse([])[3] == 0


def test_reuse_layout_left_pads_the_held_states_and_the_rest():
    P, N, cols = reuse_layout([40, 20, 30], [32, 0, 16])
    assert (P, N) == (32, 20) and cols == [(0, 44), (32, 32), (16, 38)]
    assert reuse_layout([], []) == (0, 0, [])


def test_a_partial_store_reuses_a_prefix_to_its_last_token():
    "issue 30: the hf: store reuses a prefix that ends inside a block (whole blocks lost up to 15 tokens per reuse)."
    a, b = list(range(100)), list(range(40)) + [999] * 60
    whole, part = BlockStore(1e6), BlockStore(1e6, partial=True)
    whole.add(a, tail=True)
    part.add(a, tail=True)
    assert whole.match(b)[0] == 32 and part.match(b)[0] == 40
    n, payloads = part.match(a + [7], touch=False)
    # 6 whole blocks and the 4-token tail kept with tail=True
    assert n == 100 and len(payloads) == 7
    assert part.match(a, limit=99)[0] == 99 and part.match([999] + a)[0] == 0 and part.stats["hit_tokens"] == 40 + 99
    nt = BlockStore(1e6, partial=True)
    nt.add(a)
    assert nt.match(a + [7])[0] == 96  # without tail=True the last, shorter block is not kept


def test_a_partial_store_forgets_the_starts_of_the_blocks_it_drops():
    st = BlockStore(4 * 16, partial=True)
    # 3 blocks each (2 whole, 1 of 8): 2 sequences fit
    for i in range(6):
        st.add([1000 * i + j for j in range(40)], tail=True)
    assert st.used <= st.capacity and st.stats["evicted"] > 0
    held = set(st._blocks)
    assert all(h in held for h in st._starts.values())  # no start names a dropped block
    assert st.match([5000 + j for j in range(20)])[0] == 20 and st.match([0, 1, 2])[0] == 0


def test_stage_levels_compute_the_longest_rests_first_when_padding_costs_more_than_a_pass():
    assert stage_levels([42, 80, 42, 80], 32) == [80, 42]  # 2 x 38 first, then 4 x 42: 244 + 64, not 4 x 80 + 32
    assert stage_levels([42, 80, 42, 80], 512) == [80]  # a costly pass: one padded pass
    assert stage_levels([40, 41, 42], 32) == [42] and stage_levels([], 5) == [] and stage_levels([0, 0], 5) == []
    assert stage_levels([10, 50, 90], 0) == [90, 50, 10]  # free passes: no padding at all
