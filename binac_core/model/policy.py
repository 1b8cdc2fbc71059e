"""The in-process model: one base model with two named LoRA adapters, one per `AdapterRole` (`actor`, `critic`), via
peft.

Both adapters start as the identity (LoRA's B matrix is zero-initialised), so the initial actor and the initial
critic are the base model itself; the base (adapters disabled) is also the KL reference of both.

A `Policy` stays loaded for the whole process. Pipeline stages exchange `AdapterRef`s (folder + digest), never
weights: `sync(ref)` loads an adapter (and its optimizer state) from disk only when the in-memory copy has a
different digest, so a resumed or cached run continues from exactly the saved state.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import shutil
import tempfile
import threading
from pathlib import Path

import torch
from peft import LoraConfig as PeftLoraConfig
from peft import get_peft_model, set_peft_model_state_dict
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from binac_core.errors import BinacError
from binac_core.foundation import stage_objects
from binac_core.foundation.config import Config
from binac_core.foundation.faults import fault_point
from binac_core.foundation.files import MISSING_HINT, file_digest
from binac_core.model.generation import AdapterRef
from binac_core.model.memory import map_large_blocks
from binac_core.model.stage_io import AdapterRole


def lora_config(cfg: Config) -> PeftLoraConfig:
    """The peft LoRA config of both adapters, from the `lora` section (also what bench/grpo.py hands TRL)."""
    return PeftLoraConfig(
        r=cfg.lora.rank,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=list(cfg.lora.target_modules),
        task_type="CAUSAL_LM",
    )


def training_device(setting: str) -> torch.device:
    """The device `model.device` names (`cpu`, `cuda`, or `auto`: CUDA where torch sees a device, else the CPU);
    `cuda` where torch sees none is refused in one line."""
    if setting == "auto":
        setting = "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise BinacError(
            "model.device=cuda: torch sees no CUDA device here (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}, torch {torch.__version__}); "
            "--set model.device=cpu runs on the CPU"
        )
    return torch.device(setting)


class Policy:
    def __init__(self, base_dir: str | Path, cfg: Config, seed: int = 0):
        map_large_blocks()  # a model's activations must not pile up in the heap: binac_core/model/memory.py
        dtype = getattr(torch, cfg.model.dtype)
        self.cfg = cfg
        self.tokenizer = AutoTokenizer.from_pretrained(base_dir)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.device = training_device(cfg.model.device)
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype)
        base.to(self.device)
        torch.manual_seed(seed)
        self.model = get_peft_model(base, lora_config(cfg), adapter_name=AdapterRole.ACTOR.value)
        self.model.add_adapter(AdapterRole.CRITIC.value, lora_config(cfg))
        self.model.eval()
        self.loaded: dict[str, str] = {}
        self.holds = 0
        """How many in-memory references `hold` has handed out (the number in their digests)."""
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.optimizer_states: dict[str, dict] = {}
        """An adapter's optimizer state read from its folder (`sync`), until an update creates its optimizer."""

    # ---- adapters -------------------------------------------------------------------------------------------
    def params(self, name: str) -> list[torch.nn.Parameter]:
        return [p for n, p in self.model.named_parameters() if f".{name}." in n and "lora_" in n]

    def optimizer(self, name: str, lr: float) -> torch.optim.Optimizer:
        """Adapter `name`'s AdamW at learning rate `lr`: created on first use, from the state its folder held
        (`sync`) if any; the learning rate is always `lr` (the update's settings), never a stored one."""
        if name not in self.optimizers:
            opt = torch.optim.AdamW(self.params(name), lr=lr, weight_decay=0.0)
            if name in self.optimizer_states:
                opt.load_state_dict(self.optimizer_states.pop(name))
            self.optimizers[name] = opt
        for group in self.optimizers[name].param_groups:
            group["lr"] = lr
        return self.optimizers[name]

    @contextlib.contextmanager
    def using(self, ref: AdapterRef | None):
        """Activate an adapter (synced from disk if needed) or, for None, the bare base model."""
        if ref is None:
            with self.model.disable_adapter():
                yield self.model
            return
        self.sync(ref)
        self.model.set_adapter(ref.name)
        yield self.model

    def train_mode(self, name: str, lr: float):
        """Make `name` the only trainable adapter (peft freezes the inactive one) and return its optimizer at
        learning rate `lr`."""
        self.model.set_adapter(name)
        for n, p in self.model.named_parameters():
            p.requires_grad_(f".{name}." in n and "lora_" in n)
        return self.optimizer(name, lr)

    def sync(self, ref: AdapterRef) -> None:
        if self.loaded.get(ref.name) == ref.digest:
            return
        if not ref.path:
            raise BinacError(
                f"adapter {ref.name} {ref.digest} was held in memory only (`Policy.hold`) and another "
                "has been loaded since: no folder holds it"
            )
        folder = Path(ref.path)
        if stage_objects.enabled():  # a folder this host lacks, fetched by its key, digest checked
            folder = stage_objects.get_folder(ref.path, ref.key, ref.digest)
        if not (folder / "adapter_model.safetensors").is_file():
            raise BinacError(f"adapter {ref.name} missing: {folder / 'adapter_model.safetensors'} ({MISSING_HINT})")
        state = load_file(str(folder / "adapter_model.safetensors"), device=str(self.device))
        set_peft_model_state_dict(self.model, state, adapter_name=ref.name)
        opt_file = folder / "optimizer.pt"
        self.optimizers.pop(ref.name, None)
        self.optimizer_states.pop(ref.name, None)
        if opt_file.exists():
            self.optimizer_states[ref.name] = torch.load(opt_file, weights_only=True, map_location=self.device)
        self.loaded[ref.name] = ref.digest

    def begin_update(self, ref: AdapterRef) -> None:
        """Sync adapter `ref` for an update of its weights in memory, and forget its digest until the next `save`
        (which records the new one): a task that fails mid-update leaves weights no file holds, and the next
        `sync` of any reference then reloads them from disk."""
        self.sync(ref)
        self.loaded.pop(ref.name)

    def save(self, name: AdapterRole, folder: str | Path) -> AdapterRef:
        """Write adapter `name` (+ its optimizer state) atomically into `folder` and return its reference.

        The files are written into a temporary folder of their own (unique per process and thread, beside
        `folder`) and renamed into place, so concurrent writers of one folder never share a temporary folder; the
        initial adapters of one seed are written by every method's run into one shared folder
        (`flows/train.py`). See `_publish` for a destination that already exists."""
        folder = Path(folder)
        tmp = self._write_temp(name, folder)
        fault_point(f"adapter-written:{name}", 0)  # tests/integration/test_reliability.py: two writers, one destination
        try:
            ref = self._publish(name, tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if stage_objects.enabled():  # in the object store before the stage returns
            ref = dataclasses.replace(ref, key=stage_objects.put_folder(folder))
        return ref

    def hold(self, name: AdapterRole) -> AdapterRef:
        """A reference to adapter `name` as it is in memory, written nowhere (an update with no folder:
        `update_adapter`, the in-memory loop `binac_core.rl.loop`). Its digest, `memory:<name>:<n>` (n counts this
        policy's holds), is recorded as loaded, so `sync` of it is a no-op until another reference of `name` is
        synced; its `path` is empty, and syncing it after that is refused (`sync`)."""
        self.holds += 1
        digest = f"memory:{name}:{self.holds}"
        self.loaded[name] = digest
        return AdapterRef(name, "", digest)

    def _write_temp(self, name: str, folder: Path) -> Path:
        """The adapter's files in a fresh temporary folder beside `folder` (tempfile.mkdtemp: never shared)."""
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(
            tempfile.mkdtemp(prefix=f".{folder.name}.tmp-{os.getpid()}-{threading.get_ident()}-", dir=folder.parent)
        )
        try:
            self._write_adapter(name, tmp)
            state = self.optimizers[name].state_dict() if name in self.optimizers else self.optimizer_states.get(name)
            if state is not None:
                torch.save(state, tmp / "optimizer.pt")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp

    def _write_adapter(self, name: str, folder: Path) -> None:
        """`adapter_model.safetensors` and `adapter_config.json` of adapter `name`: the two files (same tensors,
        same metadata, the config in inference mode) that peft's `PeftModel.save_pretrained(selected_adapters=
        [name])` writes for a LoRA adapter, loadable by `PeftModel.from_pretrained` and vLLM alike. Not written:
        peft's README model card, whose template rendering takes 60 % of a save at the tiny preset's size."""
        state = get_peft_model_state_dict(self.model, adapter_name=name)
        save_file(
            {k: v.contiguous() for k, v in state.items()},
            str(folder / "adapter_model.safetensors"),
            metadata={"format": "pt"},
        )
        config = copy.deepcopy(self.model.peft_config[name])
        config.inference_mode = True
        if config.base_model_name_or_path is None:
            config.base_model_name_or_path = self.model.base_model.model.__dict__.get("name_or_path") or None
        config.save_pretrained(str(folder))

    def _publish(self, name: str, tmp: Path, folder: Path) -> AdapterRef:
        """Rename the written `tmp` to `folder`. Where `folder` already exists with the same content (a
        concurrent writer of the same deterministic adapter, e.g. two methods' runs of one seed initialising
        the shared adapters), the existing one is kept and `tmp` dropped; with other content it is replaced
        (moved aside under a unique name, then removed), as a re-run of an update overwrites its output."""
        digest = file_digest(tmp)
        for _ in range(100):
            try:
                os.rename(tmp, folder)
                break
            except FileNotFoundError:
                raise
            except OSError:  # `folder` exists (non-empty): keep it when equal, else move it aside and retry
                pass
            try:
                if file_digest(folder) == digest:
                    shutil.rmtree(tmp, ignore_errors=True)
                    break
                aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-{os.getpid()}-", dir=folder.parent))
                os.rename(folder, aside / folder.name)
                shutil.rmtree(aside, ignore_errors=True)
            except FileNotFoundError:  # another writer moved it meanwhile: try the rename again
                continue
        else:
            raise RuntimeError(f"could not publish adapter {name} into {folder}")
        self.loaded[name] = digest
        return AdapterRef(name, str(folder), digest)

    def adapter_state(self, name: str) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model, adapter_name=name).items()}
