"""transformers' common model tests (ModelTesterMixin from its sdist) on a tiny Llama, with our own tester.

The sdist ships tests/test_modeling_common.py but not tests/models/ (nor the causal-LM tester), so the tester
below is ropekit's: it builds the tiny config and inputs the common tests need.
"""

from __future__ import annotations

import unittest

import torch
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification, LlamaModel

from .test_modeling_common import ModelTesterMixin, ids_tensor


class LlamaTinyTester:
    def __init__(self, parent: unittest.TestCase) -> None:
        self.parent = parent
        self.batch_size, self.seq_length, self.is_training = 2, 7, True
        self.vocab_size, self.hidden_size, self.num_hidden_layers = 99, 32, 2
        self.num_attention_heads, self.num_key_value_heads, self.intermediate_size = 4, 2, 37
        self.max_position_embeddings, self.type_sequence_label_size, self.num_labels = 64, 2, 3

    def get_config(self) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            intermediate_size=self.intermediate_size,
            max_position_embeddings=self.max_position_embeddings,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        )

    def prepare_config_and_inputs_for_common(self) -> tuple[LlamaConfig, dict[str, torch.Tensor]]:
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        mask = torch.ones_like(input_ids)
        mask[0, :2] = 0
        return self.get_config(), {"input_ids": input_ids, "attention_mask": mask}


class LlamaRopekitSuite(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (LlamaModel, LlamaForCausalLM, LlamaForSequenceClassification)
    test_torch_exportable = False

    def setUp(self) -> None:
        self.model_tester = LlamaTinyTester(self)
