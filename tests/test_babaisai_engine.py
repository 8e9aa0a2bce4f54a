"""The BabaIsAI engine on hand-drawn maps: rules, pushing, stopping, winning, timing, losing YOU."""

from __future__ import annotations

from verlog.envs.babaisai.engine import (
    BABA,
    BALL,
    KEY,
    KIND_MASK,
    OBJ_MASK,
    W_BALL,
    W_KEY,
    WALL,
    Board,
    Outcome,
    State,
    has_you,
    make_object,
    make_state,
    stack_of,
    step,
)
from verlog.envs.babaisai.levels import level_from_map

IDLE, UP, RIGHT, DOWN, LEFT = range(5)


def kind_at(board: Board, state: State, x: int, y: int) -> int:
    """Kind of the top object of cell (x, y), 0 when empty."""
    return state.cells[y * board.width + x] & OBJ_MASK & KIND_MASK


def play(board: Board, state: State, *actions: int) -> list[Outcome]:
    outcomes = []
    for action in actions:
        out = step(board, state, action)
        outcomes.append(out)
        state = out.state
    return outcomes


# ---------------------------------------------------------------------------------------------- rules
def test_horizontal_rule() -> None:
    _, state = level_from_map("""
        #######
        #B=Y..#
        #...@.#
        #######
    """)
    assert state.rules.named() == [("baba", "you")]


def test_vertical_rule() -> None:
    _, state = level_from_map("""
        ######
        #B...#
        #=.@.#
        #Y...#
        ######
    """)
    assert state.rules.named() == [("baba", "you")]


def test_rules_read_only_left_to_right_and_top_to_bottom() -> None:
    _, state = level_from_map("""
        #######
        #Y=B.Y#
        #....=#
        #.@..B#
        #######
    """)
    assert state.rules.named() == []


def test_several_rules_share_one_is() -> None:
    _, state = level_from_map("""
        #######
        #..B..#
        #.K=Y.#
        #..V..#
        #....@#
        #######
    """)
    assert state.rules.named() == [("key", "you"), ("baba", "win")]  # horizontal before vertical


def test_rule_broken_by_a_push_is_gone_after_the_step() -> None:
    board, state = level_from_map("""
        ########
        #B=Y...#
        #......#
        #K=V...#
        #.@....#
        ########
    """)
    assert ("key", "win") in state.rules.named()
    (out,) = play(board, state, UP)
    assert out.state.rules.named() == [("baba", "you")]
    assert kind_at(board, out.state, 2, 2) != 0 and out.alive


def test_noun_is_noun_turns_every_object_of_a_kind() -> None:
    board, state = level_from_map("""
        ########
        #B=Y...#
        #......#
        #K=..k.#
        #..L...#
        #..@...#
        ########
    """)
    assert kind_at(board, state, 5, 3) == KEY
    (out,) = play(board, state, UP)
    assert ("key", "ball") in out.state.rules.named()
    assert kind_at(board, out.state, 5, 3) == BALL


def test_noun_is_noun_in_force_at_the_start_applies_at_once_buried_objects_too() -> None:
    board, state = level_from_map("""
        #######
        #B=Y..#
        #K=L@.#
        #######
    """)
    stacks = [stack_of(c) for c in state.cells]
    stacks[2 * board.width + 5] = [make_object(KEY, 2), make_object(WALL, 5)]  # a key under a wall
    state = make_state(board, stacks)
    assert [o & KIND_MASK for o in stack_of(state.cells[2 * board.width + 5])] == [BALL, WALL]


# ---------------------------------------------------------------------------------------------- pushing
def test_push_chain_moves_only_if_its_end_can_move() -> None:
    board, state = level_from_map("""
        #######
        #B=Y..#
        #.@KL.#
        #######
    """)
    first, second = play(board, state, RIGHT, RIGHT)
    assert kind_at(board, first.state, 3, 2) == BABA
    assert [kind_at(board, first.state, x, 2) for x in (4, 5)] == [W_KEY, W_BALL]
    assert second.state == first.state  # the ball word is against the border: nothing moves


def test_push_into_stop_is_blocked() -> None:
    board, state = level_from_map("""
        ########
        #B=Y...#
        #W=S...#
        #.@K+..#
        ########
    """)
    (out,) = play(board, state, RIGHT)
    assert out.state == state


def test_word_blocks_are_always_pushed_onto_things_that_do_not_stop() -> None:
    board, state = level_from_map("""
        ########
        #B=Y...#
        #.@K+..#
        ########
    """)
    (out,) = play(board, state, RIGHT)
    cell = out.state.cells[2 * board.width + 4]
    assert [o & KIND_MASK for o in stack_of(cell)] == [WALL, W_KEY]
    assert kind_at(board, out.state, 3, 2) == BABA


# ---------------------------------------------------------------------------------------------- stop, win
def test_stop_blocks_and_without_it_things_are_walked_over() -> None:
    stop_map = """
        #######
        #B=Y..#
        #W=S..#
        #.@+..#
        #######
    """
    board, state = level_from_map(stop_map)
    assert play(board, state, RIGHT)[0].state == state
    board, state = level_from_map(stop_map.replace("W=S", "W.S"))
    on, off = play(board, state, RIGHT, RIGHT)
    assert [o & KIND_MASK for o in stack_of(on.state.cells[3 * board.width + 3])] == [WALL, BABA]
    assert kind_at(board, off.state, 3, 3) == WALL  # uncovered again


def test_win_on_entering_a_win_cell_only() -> None:
    board, state = level_from_map("""
        #######
        #B=Y..#
        #K=V..#
        #.@k..#
        #######
    """)
    idle, enter = play(board, state, IDLE, RIGHT)
    assert not idle.won and idle.state == state
    assert enter.won and not enter.lost


def test_rule_completed_by_a_move_counts_from_the_next_step() -> None:
    board, state = level_from_map("""
        #######
        #B=Y..#
        #.....#
        #.=V..#
        #K....#
        #@....#
        #######
    """)
    stacks = [stack_of(c) for c in state.cells]
    stacks[4 * board.width + 1] = [make_object(KEY, 2), W_KEY]  # the `key` word lies on a key
    state = make_state(board, stacks)
    push, leave, back = play(board, state, UP, DOWN, UP)
    assert ("key", "win") in push.state.rules.named()
    assert not push.won  # baba entered the key's cell, but `key is win` was not in force yet
    assert not leave.won and back.won


def test_defeat_on_entering_a_defeat_cell() -> None:
    board, state = level_from_map("""
        #######
        #B=Y..#
        #K=X..#
        #.@k..#
        #######
    """)
    (out,) = play(board, state, RIGHT)
    assert out.lost and not out.won


def test_you_lost_when_the_you_rule_breaks() -> None:
    board, state = level_from_map("""
        #######
        #.....#
        #B=Y..#
        #.@...#
        #######
    """)
    (out,) = play(board, state, UP)
    assert not out.alive and not has_you(out.state)


# ---------------------------------------------------------------------------------------------- more rules
def test_a_line_of_you_objects_moves_together() -> None:
    board, state = level_from_map("""
        ########
        #B=Y...#
        #.@@...#
        ########
    """)
    (out,) = play(board, state, RIGHT)
    assert [kind_at(board, out.state, x, 2) for x in (2, 3, 4)] == [0, BABA, BABA]


def test_pull_drags_the_object_behind() -> None:
    board, state = level_from_map("""
        ########
        #B=Y...#
        #K=U...#
        #.k@...#
        ########
    """)
    (out,) = play(board, state, RIGHT)
    assert [kind_at(board, out.state, x, 3) for x in (2, 3, 4)] == [0, KEY, BABA]


def test_move_objects_walk_and_turn_round_at_walls() -> None:
    board, state = level_from_map("""
        #######
        #B=Y..#
        #K=M..#
        #@....#
        #....k#
        #######
    """)
    assert board.tracks_facing
    keys = []
    for out in play(board, state, DOWN, DOWN, DOWN, DOWN):  # the key starts facing up
        keys.append(next(i for i, c in enumerate(out.state.cells) if c & KIND_MASK == KEY))
    assert [divmod(i, board.width)[::-1] for i in keys] == [(5, 3), (5, 2), (5, 1), (5, 2)]


def test_open_meets_shut_destroys_both() -> None:
    board, state = level_from_map("""
        ########
        #B=Y...#
        #B=O...#
        #D=C...#
        #.@d...#
        ########
    """)
    (out,) = play(board, state, RIGHT)
    assert kind_at(board, out.state, 2, 4) == 0 and kind_at(board, out.state, 3, 4) == 0
    assert not out.alive
