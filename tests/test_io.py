"""File loading for the CLI: every format, one-file and two-file forms, actionable errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mdsd_ot.io import load_arrays, load_distribution, load_pair

P = np.array([0.5, 0.3, 0.2, 0.0])
Q = np.array([0.1, 0.2, 0.3, 0.4])


def _check(pair):
    p, q = pair
    np.testing.assert_array_equal(p, P)
    np.testing.assert_array_equal(q, Q)


def test_npz(tmp_path):
    f = tmp_path / "pq.npz"
    np.savez(f, p=P, q=Q)
    _check(load_pair(f))


def test_npy_one_and_two_files(tmp_path):
    both = tmp_path / "pq.npy"
    np.save(both, np.vstack([P, Q]))
    _check(load_pair(both))
    fp, fq = tmp_path / "p.npy", tmp_path / "q.npy"
    np.save(fp, P)
    np.save(fq, Q)
    _check(load_pair(fp, fq))
    _check(load_pair(str(fp), str(fq)))


def test_json_forms(tmp_path):
    obj = tmp_path / "obj.json"
    obj.write_text(json.dumps({"p": P.tolist(), "q": Q.tolist()}))
    _check(load_pair(obj))
    lists = tmp_path / "lists.json"
    lists.write_text(json.dumps([P.tolist(), Q.tolist()]))
    _check(load_pair(lists))
    fp, fq = tmp_path / "p.json", tmp_path / "q.json"
    fp.write_text(json.dumps(P.tolist()))
    fq.write_text(json.dumps([1, 2, 3, 4]))  # integers in text formats become floats
    p, q = load_pair(fp, fq)
    assert q.dtype == np.float64 and q.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_text_forms(tmp_path):
    two = tmp_path / "pq.txt"
    two.write_text("# target then draft\n0.5 0.3 0.2 0\n0.1, 0.2, 0.3, 0.4  # draft\n")
    _check(load_pair(two))
    column = tmp_path / "p.csv"
    column.write_text("0.5\n0.3\n0.2\n0\n")
    np.testing.assert_array_equal(load_distribution(column), P)
    row = tmp_path / "q.dat"
    row.write_text("0.1,0.2,0.3,0.4\n")
    _check(load_pair(column, row))


@pytest.mark.parametrize(
    "name,content,match",
    [
        ("bad.json", "{not json", "not valid JSON"),
        ("keys.json", '{"p": [0.5, 0.5]}', "missing \\['q'\\]"),
        ("three.json", "[[1], [2], [3]]", "exactly two"),
        ("words.json", '["a", "b"]', "only numbers"),
        (
            "numeric_strings.json",
            '[["0.5", "0.5"], [0.5, 0.5]]',
            "numeric_strings.json: p must contain only numbers",
        ),
        ("bools.json", '{"p": [true, false], "q": [0.5, 0.5]}', "bools.json: 'p' must contain only numbers"),
        ("nulls.json", "[0.5, null, 0.5]", "only numbers; found the JSON value null"),
        ("deep.json", "[" * 100_000 + "]" * 100_000, "deep.json: JSON nested too deeply"),
        ("deep_list.json", "[[" + "[" * 200 + "0.5" + "]" * 200 + "], [0.5]]", "only numbers|flat list"),
        ("huge_int.json", "[" + "1" * 5000 + ", 0.5]", "huge_int.json cannot be read: .*digits"),
        ("bad.txt", "0.5 zero 0.5\n", "'zero' is not a number"),
        ("empty.txt", "# nothing\n", "no numbers"),
        ("many.txt", "0.5 0.5\n0.5 0.5\n0.5 0.5\n", "two lines"),
    ],
)
def test_bad_files(tmp_path, name, content, match):
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_arrays(f)


def test_bad_binary_and_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_pair(tmp_path / "missing.npz")
    with pytest.raises(IsADirectoryError):
        load_pair(tmp_path)
    f = tmp_path / "junk.npy"
    f.write_bytes(b"\x00\x01garbage")
    with pytest.raises(ValueError, match="could not be read"):
        load_pair(f)
    z = tmp_path / "junk.npz"
    z.write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(ValueError, match="could not be read"):
        load_pair(z)
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, target=P, draft=Q)
    with pytest.raises(ValueError, match="needs arrays 'p' and 'q'"):
        load_pair(wrong)
    batch = tmp_path / "batch.npz"
    np.savez(batch, p=np.ones((3, 4)) / 4, q=np.ones((3, 4)) / 4)
    with pytest.raises(ValueError, match="expected \\(V,\\)"):
        load_pair(batch)
    row = tmp_path / "row.npz"
    np.savez(row, p=P[None, :], q=Q[None, :])  # a (1, V) row is accepted
    _check(load_pair(row))
    cube = tmp_path / "cube.npy"
    np.save(cube, np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="shape"):
        load_pair(cube)


def test_one_vs_two_distributions(tmp_path):
    single = tmp_path / "p.npy"
    np.save(single, P)
    with pytest.raises(ValueError, match="second file"):
        load_pair(single)
    both = tmp_path / "pq.npz"
    np.savez(both, p=P, q=Q)
    with pytest.raises(ValueError, match="holds both"):
        load_pair(both, single)


def test_huge_json_number_on_the_command_line_names_the_file(tmp_path, capsys):
    from mdsd_ot.cli import main

    f = tmp_path / "p.json"
    f.write_text('{"p": [' + "7" * 5000 + ', 0.5], "q": [0.5, 0.5]}')
    assert main(["bound", str(f)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"mdsd-ot bound: error: {f} cannot be read")


def test_huge_json_number_in_a_prompt_file_names_the_line(tmp_path):
    from mdsd_ot.study import load_prompts

    f = tmp_path / "prompts.jsonl"
    f.write_text('{"prompt": "a"}\n{"prompt": "b", "x": ' + "7" * 5000 + "}\n")
    with pytest.raises(ValueError, match=r"prompts.jsonl:2 cannot be read"):
        load_prompts(f)


@pytest.mark.parametrize("digits", [310, 400, 1000, 4300])
def test_json_integer_beyond_float64_exits_2_with_one_line(tmp_path, capsys, digits):
    """JSON integers of 310 to 4,300 digits parse (Python ints) but overflow float64: one line naming
    the file and the size of the number, exit 2, no OverflowError traceback."""
    from mdsd_ot.cli import main

    f = tmp_path / "pq.json"
    f.write_text('{"p": [0.5, ' + "9" * digits + '], "q": [0.5, 0.5]}')
    assert main(["bound", str(f)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"mdsd-ot bound: error: {f}: 'p' holds a number too large for float64")
    assert f"an integer of {digits} digits" in line
    f.write_text("[[0.5, " + "1" * digits + "], [0.5, 0.5]]")
    with pytest.raises(ValueError, match="too large for float64"):
        load_pair(f)


def test_npy_header_claiming_more_than_the_file_holds(tmp_path, capsys):
    """A .npy whose header claims shape (2, 2**40) but holds 64 bytes: refused from the header and the
    file size before numpy allocates (it raised MemoryError with a 30-line traceback)."""
    from numpy.lib import format as npy_format

    from mdsd_ot.cli import main

    f = tmp_path / "huge.npy"
    with open(f, "wb") as out:
        npy_format.write_array_header_1_0(out, {"descr": "<f8", "fortran_order": False, "shape": (2, 2**40)})
        out.write(b"\0" * 64)
    assert main(["bound", str(f)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "declares an array of shape (2, 1099511627776)" in line and "holds 64 bytes" in line
    np.save(tmp_path / "ok.npy", np.stack([P, Q]))
    _check(load_pair(tmp_path / "ok.npy"))  # an honest file still loads
    data = (tmp_path / "ok.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-8])  # truncated by 8 bytes
    with pytest.raises(ValueError, match="truncated"):
        load_pair(tmp_path / "cut.npy")
