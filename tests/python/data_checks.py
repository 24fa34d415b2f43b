#!/usr/bin/env python3
"""End-to-end checks of the data files --data accepts (docs/training.md, Data).

    data_checks.py {train,verbs} --bin path/to/ctxlab --work scratch/dir

  train   `ctxlab train` for a few steps on a slice of the shipped corpus in every form: a nanoGPT
          .bin of its bytes (--vocab 256) and an llm.c shard of them give the text file's training
          losses bit for bit (the same tokens, mapped from the file), and so does a JSONL file whose
          documents are its lines; --data a --data b equals --data a,b; --val-data runs; the run
          records an "ids" tokenizer for --vocab; bad requests are one-line errors naming the file
          and the field (token file without --vocab, a token past --vocab, --val-data with
          --val-fraction, a bad llm.c header, a JSONL line without the field).
  verbs   the other verbs that read --data: `eval` on the .bin with the run's checkpoint (and the
          refusal of text there); `tokenizer train` on JSONL learns the text file's model byte for
          byte (and refuses a token file).

Prints one line per check, then "N passed, N failed"; exits 1 on failure. Standard library only.
"""

import argparse
import csv
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checklib as cl  # noqa: E402

check, run, must_run, expect_failure = cl.check, cl.run, cl.must_run, cl.expect_failure
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "pride_and_prejudice.txt")
FAST = ["--preset", "tiny", "--steps", 4, "--batch", 2, "--eval-interval", 0, "--eval-batches", 1,
        "--no-plot", "--quiet", "--force"]


def corpus_slice():
    with open(DATA, "rb") as f:
        return f.read()[:20000]


def llmc(ids, magic=20240520, version=1, count=None):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(ids) if count is None else count
    return struct.pack("<256i", *header) + struct.pack(f"<{len(ids)}H", *ids)


def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


def rows(out, name):
    with open(os.path.join(out, name), newline="") as f:
        return list(csv.DictReader(f))


def losses(out):
    return [r["loss"] for r in rows(out, "train.csv")]


def files(d):
    """The corpus slice as text, nanoGPT .bin, llm.c shard and JSONL (one document per line)."""
    text = corpus_slice()
    lines = text.decode("latin-1").split("\n")
    assert lines[-1] != ""  # the slice ends mid-line: the JSONL joins its documents with '\n' after each
    f = {"txt": write(os.path.join(d, "slice.txt"), text + b"\n"),
         "bin": write(os.path.join(d, "slice.bin"), struct.pack(f"<{len(text) + 1}H", *(text + b"\n"))),
         "llmc": write(os.path.join(d, "shard_000000.bin"), llmc(list(text + b"\n"))),
         "jsonl": write(os.path.join(d, "slice.jsonl"),
                        "".join(json.dumps({"id": i, "body": ln}) + "\n" for i, ln in enumerate(lines)))}
    return f, text


def cmd_train():
    d = cl.fresh_dir("train")
    f, text = files(d)
    out = {k: os.path.join(d, "run_" + k) for k in ("txt", "bin", "llmc", "jsonl", "two", "rep", "val")}
    must_run("train on the text file", ["train", *FAST, "--data", f["txt"], "--out", out["txt"]])
    must_run("train on the nanoGPT .bin with --vocab 256",
             ["train", *FAST, "--data", f["bin"], "--vocab", 256, "--out", out["bin"]])
    must_run("train on the llm.c shard with --vocab 256",
             ["train", *FAST, "--data", f["llmc"], "--vocab", 256, "--out", out["llmc"]])
    # bytes of Latin-1 text: json.dumps escapes them, the reader writes them back as UTF-8; the slice is ASCII
    check("the corpus slice is ASCII (its JSONL text is the same bytes)", all(b < 128 for b in text))
    must_run("train on JSONL with --data-field body",
             ["train", *FAST, "--data", f["jsonl"], "--data-field", "body", "--out", out["jsonl"]])
    ref = losses(out["txt"])
    check("4 training rows", len(ref) == 4, ref)
    for k in ("bin", "llmc", "jsonl"):
        check(f"{k}: the text file's training losses bit for bit", losses(out[k]) == ref, f"{losses(out[k])} vs {ref}")
    header, _ = cl.split_st(os.path.join(out["bin"], "model.safetensors"))
    tok = json.loads(header["__metadata__"]["tokenizer"])
    check("--vocab 256 records an ids tokenizer of 256", tok.get("type") == "ids" and tok.get("vocab_size") == 256, tok)

    half = write(os.path.join(d, "half.txt"), text[: len(text) // 2])
    rest = write(os.path.join(d, "rest.txt"), text[len(text) // 2:] + b"\n")
    must_run("--data a,b", ["train", *FAST, "--data", f"{half},{rest}", "--out", out["two"]])
    must_run("--data a --data b", ["train", *FAST, "--data", half, "--data", rest, "--out", out["rep"]])
    check("two files are the text they concatenate", losses(out["two"]) == ref and losses(out["rep"]) == ref,
          f"{losses(out['two'])} {losses(out['rep'])} vs {ref}")
    must_run("--val-data", ["train", *FAST, "--data", f["bin"], "--val-data", f["llmc"], "--vocab", 256,
                            "--eval-interval", 2, "--out", out["val"]])
    vals = rows(out["val"], "val.csv")
    check("--val-data: validation losses written", len(vals) >= 2, vals)

    bad = os.path.join(d, "bad")
    expect_failure("token file without --vocab or --tokenizer", ["train", *FAST, "--data", f["bin"], "--out", bad],
                   ["--data", f["bin"], "pre-tokenized", "--vocab N", "--tokenizer"])
    wide = write(os.path.join(d, "wide.bin"), struct.pack("<6H", 1, 2, 3, 299, 5, 6) * 2000)
    expect_failure("a token at or past --vocab", ["train", *FAST, "--data", wide, "--vocab", 256, "--out", bad],
                   [wide, "token 299", "token index 3", "byte offset 6", "vocabulary size 256"])
    expect_failure("--val-data with --val-fraction", ["train", *FAST, "--data", f["txt"], "--val-data", f["txt"],
                                                      "--val-fraction", 0.2, "--out", bad],
                   ["--val-data and --val-fraction"])
    v2 = write(os.path.join(d, "v2.bin"), llmc(list(range(100)), version=2))
    expect_failure("llm.c version 2", ["train", *FAST, "--data", v2, "--vocab", 256, "--out", bad],
                   [v2, "header[1] (version) is 2", "expected 1"])
    nofield = write(os.path.join(d, "nofield.jsonl"), '{"text": "a"}\n{"body": "b"}\n')
    expect_failure("JSONL line without the field", ["train", *FAST, "--data", nofield, "--out", bad],
                   [nofield + " line 2", "no field 'text'", "--data-field"])
    check("no run directory left by the refusals", not os.path.exists(os.path.join(bad, "model.safetensors")))


def cmd_verbs():
    d = cl.fresh_dir("verbs")
    f, _ = files(d)
    run_dir = os.path.join(d, "run")
    must_run("train on the .bin", ["train", *FAST, "--data", f["bin"], "--vocab", 256, "--out", run_dir])
    ck = os.path.join(run_dir, "model.safetensors")
    p = must_run("eval on the .bin", ["eval", "--checkpoint", ck, "--data", f["bin"], "--lengths", 32,
                                      "--max-windows", 4])
    check("eval prints the loss at length 32", any(ln.split()[:2] == ["32", "4"] for ln in p.stdout.splitlines()),
          p.stdout[-500:])
    expect_failure("eval of text with the ids checkpoint", ["eval", "--checkpoint", ck, "--data", f["txt"]],
                   ["pre-tokenized", "--tokenizer"])
    model, ref = os.path.join(d, "tok.model"), os.path.join(d, "txt.model")
    must_run("tokenizer train on JSONL", ["tokenizer", "train", "--data", f["jsonl"], "--data-field", "body",
                                          "--vocab", 400, "--out", model])
    must_run("tokenizer train on the text file", ["tokenizer", "train", "--data", f["txt"], "--vocab", 400,
                                                  "--out", ref])
    check("the JSONL's tokenizer is the text file's, byte for byte",
          os.path.exists(model) and os.path.exists(ref) and cl.sha(model) == cl.sha(ref))
    expect_failure("tokenizer train on a token file", ["tokenizer", "train", "--data", f["bin"], "--vocab", 300,
                                                       "--out", os.path.join(d, "no.model")],
                   ["--data", f["bin"], "already tokenized"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["train", "verbs"])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    cl.configure(a.bin, a.work)
    return cl.run_subcommand(a.command, {"train": cmd_train, "verbs": cmd_verbs}[a.command])


if __name__ == "__main__":
    sys.exit(main())
