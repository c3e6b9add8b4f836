"""The compiled HLO as text, parsed: each instruction's kind, shape, source line and, for a dot, its FLOPs.

`jaxintro profile` reads a trace of XLA ops by their instruction names; these are the names of
`compiled.as_text()`, and this module turns that text into what the op table shows beside each op.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import NamedTuple


class HloOp(NamedTuple):
    """One instruction of a compiled HLO module: what the op table needs from it."""

    name: str
    opcode: str
    shape: str  # e.g. "f32[128,256]{1,0}"
    operands: tuple[str, ...]  # operand names (inline shapes, where the text has them, in `operand_shapes`)
    operand_shapes: tuple[str, ...]
    called: tuple[str, ...]  # computations it runs: a fusion's body, a loop's body and condition...
    attrs: str  # the rest of the line: dims, metadata, backend config


class HloModule(NamedTuple):
    """A compiled module's instructions (names are unique module-wide) and its source locations."""

    name: str
    ops: dict[str, HloOp]
    computations: dict[str, list[str]]  # computation name -> its instructions' names
    frames: dict[int, str]  # stack_frame_id -> "file.py:line function"
    entry: str  # the computation the program starts in


_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*->.*\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_CALLED = re.compile(r"\b(?:calls|to_apply|body|condition|true_computation|false_computation|"
                     r"branch_computations)=(\{[^}]*\}|%?[\w.\-]+)")
_DIMS = re.compile(r"^[a-z][a-z0-9]*\[([0-9,]*)\]")


def _balanced(text: str, start: int) -> int:
    """The index just past the bracket group that opens at `text[start]` ("(" or "{")."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    depth = []
    for i in range(start, len(text)):
        ch = text[i]
        if ch in pairs:
            depth.append(pairs[ch])
        elif depth and ch == depth[-1]:
            depth.pop()
            if not depth:
                return i + 1
    return len(text)


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, current = [], 0, []
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _parse_instruction(name: str, rest: str) -> HloOp | None:
    """`SHAPE opcode(operands), attrs` after `name = `; None if the line is not an instruction."""
    if rest.startswith("("):  # a tuple shape, which holds spaces
        end = _balanced(rest, 0)
    else:
        end = rest.find(" ")
    if end <= 0:
        return None
    shape, tail = rest[:end], rest[end:].lstrip()
    match = re.match(r"([\w\-]+)\(", tail)
    if not match:
        return None
    close = _balanced(tail, match.end() - 1)
    operand_text, attrs = tail[match.end():close - 1], tail[close:]
    operands, shapes = [], []
    for part in _split_top(operand_text):
        tokens = part.split()
        operands.append(tokens[-1].lstrip("%") if tokens else "")
        shapes.append(" ".join(tokens[:-1]))  # "f32[128,784]{1,0}" where the text prints operand shapes
    called = []
    for found in _CALLED.findall(attrs):
        called += [c.strip().lstrip("%") for c in found.strip("{}").split(",") if c.strip()]
    return HloOp(name, match.group(1), shape, tuple(operands), tuple(shapes), tuple(called), attrs)


def _tables(lines: list[str]) -> dict[str, dict[int, str]]:
    """The module's FileNames / FunctionNames / FileLocations / StackFrames tables, as id -> raw text."""
    tables: dict[str, dict[int, str]] = {}
    current: dict[int, str] | None = None
    for line in lines:
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = tables.setdefault(line, {})
        elif not line.strip():
            current = None
        elif current is not None:
            key, _space, value = line.partition(" ")
            if key.isdigit():
                current[int(key)] = value.strip()
    return tables


def _frames(tables: dict[str, dict[int, str]]) -> dict[int, str]:
    """stack_frame_id -> "file.py:line function" (the innermost frame: where the op was written)."""

    def field(text: str, name: str) -> int:
        found = re.search(rf"\b{name}=(\d+)", text)
        return int(found.group(1)) if found else -1

    files = {k: Path(v.strip('"')).name for k, v in tables.get("FileNames", {}).items()}
    functions = {k: short_function(v.strip('"')) for k, v in tables.get("FunctionNames", {}).items()}
    locations = {k: f"{files.get(field(v, 'file_name_id'), '?')}:{field(v, 'line')} "
                    f"{functions.get(field(v, 'function_name_id'), '?')}"
                 for k, v in tables.get("FileLocations", {}).items()}
    return {k: locations.get(field(v, "file_location_id"), "") for k, v in tables.get("StackFrames", {}).items()}


def short_function(name: str) -> str:
    """`scale_by_adam.<locals>.update_fn` -> `scale_by_adam`: the function a reader can search for."""
    return name.split(".<locals>.")[0]


def parse_hlo(text: str) -> HloModule:
    """Parse `compiled.as_text()`: every instruction, the computations, and the source table."""
    lines = text.splitlines()
    module = re.match(r"HloModule\s+([\w.\-]+)", lines[0]) if lines else None
    ops: dict[str, HloOp] = {}
    computations: dict[str, list[str]] = {}
    current = entry = ""
    for line in lines:
        header = _HEADER.match(line)
        if header and not line.startswith(" "):
            current = header.group(1)
            computations[current] = []
            entry = current if line.startswith("ENTRY") else entry
            continue
        found = _INSTRUCTION.match(line)
        if found and current:
            op = _parse_instruction(found.group(1), found.group(2))
            if op is not None:
                ops[op.name] = op
                computations[current].append(op.name)
    return HloModule(module.group(1) if module else "?", ops, computations, _frames(_tables(lines)), entry)


def shape_dims(shape: str) -> tuple[int, ...]:
    """`f32[128,256]{1,0}` -> (128, 256); a scalar -> ()."""
    found = _DIMS.match(shape)
    if not found:
        return ()
    return tuple(int(d) for d in found.group(1).split(",") if d)


def op_flops(module: HloModule, name: str) -> int:
    """Matmul FLOPs of one execution of an op: 2*M*N*K per dot (or a TPU's matmul convolution), summed over a fusion."""
    op = module.ops.get(name)
    if op is None:
        return 0
    if op.opcode == "dot":
        lhs_shape = op.operand_shapes[0] if op.operand_shapes and op.operand_shapes[0] else \
            module.ops[op.operands[0]].shape
        lhs = shape_dims(lhs_shape)
        found = re.search(r"lhs_contracting_dims=\{([0-9,]*)\}", op.attrs)
        contracted = math.prod(lhs[int(d)] for d in found.group(1).split(",") if d) if found else 1
        # Every output element is a K-long dot product: K multiplies and K adds.
        return 2 * math.prod(shape_dims(op.shape)) * contracted
    if op.opcode == "convolution":
        return matmul_convolution_flops(module, op)
    if op.opcode == "fusion":
        return sum(op_flops(module, inner) for comp in op.called for inner in module.computations.get(comp, []))
    return 0


def matmul_convolution_flops(module: HloModule, op: HloOp) -> int:
    """A convolution's multiply-adds, 2 per kernel element per output element: 2 * prod(output) * K * prod(window),
    K the kernel's input features. A TPU writes a matmul as one with no window (`dim_labels=bf_io->bf`): 2*M*N*K."""
    found = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", op.attrs)
    if found is None or len(op.operands) < 2:
        return 0
    kernel_shape = op.operand_shapes[1] if len(op.operand_shapes) > 1 and op.operand_shapes[1] else \
        getattr(module.ops.get(op.operands[1]), "shape", "")
    kernel, labels = shape_dims(kernel_shape), found.group(2)
    if len(kernel) != len(labels) or "i" not in labels:
        return 0
    window = math.prod(size for size, label in zip(kernel, labels) if label.isdigit())
    return 2 * math.prod(shape_dims(op.shape)) * kernel[labels.index("i")] * window


def op_kind(module: HloModule, name: str) -> str:
    """The op's opcode, with `(dot)` for a fusion that holds a matmul; `?` if the module lacks it."""
    op = module.ops.get(name)
    if op is None:
        return "?"
    if op.opcode == "fusion" and op_flops(module, name):
        return "fusion (dot)"
    return op.opcode


def op_source(module: HloModule, name: str) -> str:
    """Where the op comes from: `file.py:line function` of its stack frame, else its JAX op name; `-` if none.

    `(backward)` marks an op of the gradient: JAX names those `transpose(jvp(...))`, and their
    stack frame is the forward line they differentiate. Ops XLA inserted itself (layout copies)
    carry no metadata.
    """
    op = module.ops.get(name)
    if op is None:
        return "-"
    op_name = re.search(r'op_name="([^"]*)"', op.attrs)
    backward = " (backward)" if op_name and "transpose(" in op_name.group(1) else ""
    frame = re.search(r"stack_frame_id=(\d+)", op.attrs)
    if frame and module.frames.get(int(frame.group(1))):
        return module.frames[int(frame.group(1))] + backward
    file, line = re.search(r'source_file="([^"]*)"', op.attrs), re.search(r"source_line=(\d+)", op.attrs)
    if file and line:
        return f"{Path(file.group(1)).name}:{line.group(1)}{backward}"
    return op_name.group(1).rsplit("/", 1)[-1] + backward if op_name else "-"
