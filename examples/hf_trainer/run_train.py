#!/usr/bin/env python
"""Train a small GPT-2 language model with the Hugging Face Trainer, offline.

A `run_clm.py`-shaped script: argument dataclasses parsed by `HfArgumentParser` from the
command line, `set_seed(training_args.seed)` before the model is built, `Trainer.train`
and `Trainer.evaluate`, the metrics saved to `<output_dir>/all_results.json`. Nothing is
downloaded: the model is built from a `GPT2Config` (no pretrained weights), the tokenizer is
the bytes themselves (256 ids), and the text is local (`--train_file`/`--validation_file`,
else the Python standard library's own sources).

    python run_train.py --output_dir out --seed 0 --do_train --do_eval

The defaults of `TrainingArguments` below are this script's: edit them, or pass a flag.
"""
import os
import sysconfig
from dataclasses import dataclass, field

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, HfArgumentParser, Trainer, set_seed


@dataclass
class ModelArguments:
    n_layer: int = field(default=2, metadata={"help": "Transformer blocks."})
    n_embd: int = field(default=64, metadata={"help": "Width of the residual stream."})
    n_head: int = field(default=2, metadata={"help": "Attention heads (n_embd must divide by it)."})


@dataclass
class DataArguments:
    train_file: str = field(default=None, metadata={"help": "A text file (default: the standard library's sources)."})
    validation_file: str = field(default=None, metadata={"help": "A text file (default: other standard library sources)."})
    block_size: int = field(default=64, metadata={"help": "Bytes per training sequence."})
    train_bytes: int = field(default=100_000, metadata={"help": "Bytes of the standard library to train on."})
    validation_bytes: int = field(default=20_000, metadata={"help": "Bytes of it to evaluate on."})


@dataclass
class TrainingArguments(transformers.TrainingArguments):
    learning_rate: float = field(default=1e-3, metadata={"help": "The peak learning rate of AdamW."})
    warmup_steps: int = field(default=10, metadata={"help": "Linear warmup steps."})
    weight_decay: float = field(default=0.0, metadata={"help": "Decoupled weight decay of AdamW."})
    lr_scheduler_type: str = field(default="linear", metadata={"help": "The learning-rate schedule."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the training text."})
    per_device_train_batch_size: int = field(default=16, metadata={"help": "Sequences per step."})
    per_device_eval_batch_size: int = field(default=64, metadata={"help": "Sequences per eval step."})
    logging_steps: float = field(default=20, metadata={"help": "Steps between loss lines."})
    save_strategy: str = field(default="no", metadata={"help": "No checkpoints: the run's metrics are its result."})
    report_to: str = field(default="none", metadata={"help": "No experiment tracker."})


class ByteBlocks(torch.utils.data.Dataset):
    """Consecutive `block_size`-byte windows of a text, as next-byte prediction examples."""

    def __init__(self, data: bytes, block_size: int) -> None:
        ids = torch.tensor(list(data), dtype=torch.long)
        self.blocks = ids[: len(ids) // block_size * block_size].view(-1, block_size)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.blocks[index], "labels": self.blocks[index]}


def standard_library_text(limit: int, skip: int = 0) -> bytes:
    """The first `skip + limit` bytes of the standard library's sources, in a fixed order."""
    root, chunks, total = sysconfig.get_paths()["stdlib"], [], 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "test", "tests", "__pycache__"))
        for name in sorted(files):
            if name.endswith(".py") and total < skip + limit:
                with open(os.path.join(folder, name), "rb") as handle:
                    chunks.append(handle.read())
                total += len(chunks[-1])
    return b"".join(chunks)[skip: skip + limit]


def read(path: str | None, limit: int, skip: int) -> bytes:
    if path:
        with open(path, "rb") as handle:
            return handle.read()
    return standard_library_text(limit, skip)


def main() -> None:
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    set_seed(training_args.seed)    # the model's initialisation and the data order
    print(f"Training/evaluation parameters {training_args}")

    train = ByteBlocks(read(data_args.train_file, data_args.train_bytes, 0), data_args.block_size)
    valid = ByteBlocks(read(data_args.validation_file, data_args.validation_bytes, data_args.train_bytes),
                       data_args.block_size)
    config = GPT2Config(vocab_size=256, n_positions=data_args.block_size, n_embd=model_args.n_embd,
                        n_layer=model_args.n_layer, n_head=model_args.n_head, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    print(f"{sum(p.numel() for p in model.parameters()):,} parameters; {len(train)} train and "
          f"{len(valid)} validation blocks of {data_args.block_size} bytes")

    trainer = Trainer(model=model, args=training_args, train_dataset=train, eval_dataset=valid)
    if training_args.do_train:
        result = trainer.train()
        trainer.save_model()
        trainer.log_metrics("train", result.metrics)
        trainer.save_metrics("train", result.metrics)
    if training_args.do_eval:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


if __name__ == "__main__":
    main()
