"""caper_train.model.grid: grid values are fixed points of the quantizer, MatMulNBits computes with the
same values the grid gives, trained layers see their grid values and get the full gradient, and a
Clause-PRM trained on a base moved onto the grid ships with not one weight changed."""
import json

import numpy as np
import onnx
import pytest
import torch

from test_base_prm import tiny_base, write_records  # noqa: F401  (fixture)


def awkward(rows: int, cols: int) -> torch.Tensor:
    torch.manual_seed(1)
    w = torch.randn(rows, cols) * 0.05
    w[0, :16] = w[0, :16].abs()      # a block with no negative value
    w[1, :16] = -w[1, :16].abs()     # one with no positive value
    w[2, :16] = 0.0                  # an empty one
    w[3, :16] = 1e-9                 # one below fp16's range
    return w


def test_grid_values_are_fixed_points():
    from caper_train.model.grid import exact_matrix_codes, matrix_values, on_matrix_grid, on_table_grid

    w = awkward(8, 64)
    for f, back in ((on_matrix_grid, lambda g: matrix_values(*exact_matrix_codes(g, 16))), (on_table_grid, None)):
        g = f(w, 16)
        assert 0 < float((g - w).abs().max()) < 0.02, "values move onto the grid, by less than a step"
        assert torch.equal((back or (lambda x: f(x, 16)))(g), g), f"{f.__name__}: grid values come back unchanged"


def test_a_grid_block_spanning_fewer_codes_keeps_its_values():
    from caper_train.model.grid import exact_matrix_codes, matrix_values, on_matrix_grid

    # codes 1..15 with zero point 8: the block's range is 14 steps, so the plain rounding picks
    # a scale of 14/15 of the grid's and moves the values; the exact codes find the grid's scale
    s = torch.tensor(0.0078125)  # an fp16 value
    w = ((torch.arange(16.0).repeat(2)[:32].clamp(1, 15) - 8) * s)[None].repeat(2, 1)
    assert not torch.equal(on_matrix_grid(w, 32), w)
    assert torch.equal(matrix_values(*exact_matrix_codes(w, 32)), w)
    # at most 16 distinct values a block
    g = on_matrix_grid(awkward(8, 64), 16).reshape(8, 4, 16)
    assert max(len(torch.unique(b)) for b in g.reshape(-1, 16)) <= 16


def test_matmulnbits_computes_with_the_grid_values():
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from caper_train.model.grid import on_matrix_grid
    from caper_train.ship.ship import grid_matmuls

    k, n, block = 96, 24, 32  # three blocks a row: an odd count, so zero points pad their last byte
    w = awkward(n, k)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, n])],
                          [numpy_helper.from_array(w.numpy().T.copy(), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    info = grid_matmuls(m, block)
    assert info["count"] == 1 and [x.op_type for x in m.graph.node] == ["MatMulNBits"]
    x = torch.randn(7, k)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    want = (x @ on_matrix_grid(w, block).T).numpy()
    assert np.abs(y - want).max() < 1e-5
    assert np.abs(y - (x @ w.T).numpy()).max() > 1e-3, "and not with the unrounded weights"


def test_grid_linear_uses_grid_values_and_passes_the_gradient_straight_through():
    from caper_train.model.grid import GridLinear, on_matrix_grid

    lin = torch.nn.Linear(32, 4)
    with torch.no_grad():
        lin.weight.copy_(awkward(4, 32))
    GridLinear(lin, 16)
    x = torch.randn(3, 32)
    y = lin(x)
    assert torch.allclose(y, x @ on_matrix_grid(lin.weight, 16).T + lin.bias, atol=1e-6)
    y.sum().backward()
    assert torch.allclose(lin.weight.grad, x.sum(0).expand(4, 32), atol=1e-6)


def _train_and_ship(base, tmp_path, name: str):
    from caper_train.ship import ship
    from caper_train.base import base_prm
    from caper_train.model.manifest import read_manifest

    rec = tmp_path / "r.jsonl"
    write_records(rec)
    out = tmp_path / name
    assert base_prm.main(["--records", str(rec), "--base", str(base), "--family", "topk", "--layers", "3", "--top-k", "1",
                          "--threads", "1", "--epochs", "1", "--max-length", "256",
                          "--out", str(out), "--run", str(tmp_path / f"run-{name}")]) == 0
    shipped = tmp_path / f"{name}-shipped"
    rc = ship.main(["--model", str(out), "--out", str(shipped), "--records", str(rec), "--min-agreement", "0",
                    "--block", "16", "--embed-block", "16", "--threads", "1"])
    assert rc == 0
    return read_manifest(shipped)["export"]["shipped"]


def test_a_model_trained_on_the_grid_ships_exactly(tiny_base, tmp_path):
    from caper_train.model.grid import move_base, read_grid

    moved = tmp_path / "base-g16"
    info = move_base(tiny_base, moved, 16, 16)
    assert read_grid(moved) == info and info["matrices"] == 4 * 7 and info["table"]
    s = _train_and_ship(moved, tmp_path, "grid")
    assert s["matrices"]["count"] == 3 * 7 and s["matrices"]["largest_move"] == 0.0
    assert s["embedding"]["largest_move"] == 0.0
    assert s["parity"]["pair_order_agreement"] == 1.0 and s["parity"]["max_abs_diff"] < 1e-4
    # the same training on the unmoved base: shipping has to re-round it
    s = _train_and_ship(tiny_base, tmp_path, "plain")
    assert s["matrices"]["largest_move"] > 0 and s["embedding"]["largest_move"] > 0
