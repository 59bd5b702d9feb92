"""Continues prompts with a decoder language model: greedy or sampled, with
a key/value cache.

    python -m recipes.generate --weights=HuggingFaceTB/SmolLM2-135M \\
        --prompt='The capital of France is'
    python -m recipes.generate --weights=gpt2/ --prompts=prompts.txt \\
        --temperature=0.8 --top_p=0.95 --seed=1 --max_new_tokens=64
    python -m recipes.generate --weights=WORKDIR --tokenizer=tokenizer.json \\
        --prompt='Once upon a time'

--weights: a transformers GPT2LMHeadModel, LlamaForCausalLM or
Qwen2ForCausalLM (its save_pretrained folder, or the model.safetensors /
pytorch_model.bin file), a Hugging Face Hub repository such as
HuggingFaceTB/SmolLM2-135M (downloaded once into Hugging Face's cache), or a
zoo decoder's checkpoint: a run's workdir (its latest checkpoint), one of its
checkpoints, or a directory `python -m recipes.convert` wrote (the model is
read from config.json or model.json). The tokenizer is the one beside the
weights (tokenizer.json, or a SentencePiece model), or --tokenizer; a
checkpoint holds none, so give it there.

The prompts: --prompt (several times for several) and/or --prompts, a UTF-8
file of one prompt per line (blank lines skipped). Each is encoded without
special tokens (--bos puts the tokenizer's BOS token first, as Llama models
are prompted by transformers). They are generated in batches of
--batch_size, right-padded to the longest, each batch one compiled program
(zoo/generation.py): greedy with --temperature=0 (the default), else drawn
from the logits / temperature after --top_k and --top_p filtering, with
--seed; each continuation ends at the tokenizer's EOS token or after
--max_new_tokens tokens.

Prints each continuation (after a `==> prompt N <==` line when there are
several prompts); a line per batch on stderr with the tokens generated and
the speed (the first batch's time includes compiling). Mistakes end with one
line and exit status 1 (2 for a usage error).
"""

import argparse
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from recipes import export
from recipes.checkpoint import resume, transformers_files
from recipes.checkpoint.converted import MODEL_FILE
from recipes.data.text import tokenizer as tokenizer_lib
from recipes.runtime import library_noise, startup
from recipes.runtime.errors import UserError, shorten
from zoo import convert, download, generation, registry
from zoo.convert import transformers_decoder
from zoo.convert.transfer import target_shapes
from zoo.decoder import Decoder

_DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16}


class _Parser(argparse.ArgumentParser):

  def error(self, message):
    self.exit(2, f'error: {message}; see python -m recipes.generate '
              '--help.\n')


def _parser() -> argparse.ArgumentParser:
  parser = _Parser(
      prog='python -m recipes.generate',
      description='Continues prompts with a decoder language model (GPT-2, '
      'Llama shape): greedy or sampled, with a key/value cache.')
  parser.add_argument('--weights', required=True,
                      help='a transformers folder or file, a Hub repository '
                      '(HuggingFaceTB/SmolLM2-135M), or a zoo decoder\'s '
                      'workdir or checkpoint')
  parser.add_argument('--model', default=None,
                      help="the zoo decoder, e.g. smollm2_135m (default: "
                      "the weights')")
  parser.add_argument('--tokenizer', default=None,
                      help="the model's tokenizer file or folder (default: "
                      "the weights')")
  parser.add_argument('--prompt', action='append', default=[],
                      help='a prompt; give it again for more')
  parser.add_argument('--prompts', default=None,
                      help='a UTF-8 file of prompts, one per line')
  parser.add_argument('--bos', action='store_true',
                      help="start each prompt with the tokenizer's BOS token")
  parser.add_argument('--max_new_tokens', type=int, default=32,
                      help='the most tokens per continuation (default: '
                      '%(default)s)')
  parser.add_argument('--temperature', type=float, default=0.0,
                      help='0: greedy (the default); more: sampled, more '
                      'varied the higher')
  parser.add_argument('--top_k', type=int, default=0,
                      help='sample from the k most likely tokens only (0: '
                      'all, the default)')
  parser.add_argument('--top_p', type=float, default=1.0,
                      help='sample from the fewest most likely tokens of '
                      'this much probability in all (1: all, the default)')
  parser.add_argument('--seed', type=int, default=0,
                      help='of the sampling (default: %(default)s)')
  parser.add_argument('--batch_size', type=int, default=8,
                      help='prompts generated together (default: '
                      '%(default)s)')
  parser.add_argument('--dtype', default='float32', choices=list(_DTYPES),
                      help='the computation dtype (default: %(default)s; '
                      'logits are float32 either way)')
  return parser


def main(argv: list[str]) -> int:
  args = _parser().parse_args(argv)
  library_noise.keep_out()
  try:
    return _run(args)
  except (UserError, convert.ConversionError, download.DownloadError) as e:
    print(f'error: {shorten(str(e))}', file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    print('error: stopped.', file=sys.stderr)
    return 130


def _run(args) -> int:
  sampling = _sampling(args)
  for flag in ('max_new_tokens', 'batch_size'):
    if getattr(args, flag) < 1:
      raise UserError(f'--{flag}={getattr(args, flag)} must be 1 or more.')
  texts = _prompts(args.prompt, args.prompts)
  model, variables, tokenizer_path = load(args.weights, args.model,
                                          _DTYPES[args.dtype])
  tokenizer = tokenizer_lib.load(_tokenizer_path(args.tokenizer,
                                                 tokenizer_path,
                                                 args.weights))
  if tokenizer.vocab_size > model.vocab_size:
    raise UserError(
        f'tokenizer {tokenizer.path} has {tokenizer.vocab_size:,} tokens but '
        f'the model of {args.weights} embeds {model.vocab_size:,}: another '
        "model's tokenizer? Give the one saved with the weights.")
  prompts = encode(tokenizer, texts, args.bos)
  _check_positions(prompts, args.max_new_tokens, model.max_length)
  continuations = _generate(model, variables, prompts, tokenizer, sampling,
                            args)
  for i, text in enumerate(continuations):
    if len(continuations) > 1:
      print(f'==> prompt {i + 1} <==')
    print(text)
  return 0


def _sampling(args) -> generation.Sampling:
  if not (math.isfinite(args.temperature) and args.temperature >= 0):
    raise UserError(f'--temperature={args.temperature} must be a number, 0 '
                    '(greedy) or more.')
  if args.top_k < 0:
    raise UserError(f'--top_k={args.top_k} must be 0 (all tokens) or more.')
  if not 0 < args.top_p <= 1:
    raise UserError(f'--top_p={args.top_p} must be more than 0 and at most '
                    '1 (1: all tokens).')
  return generation.Sampling(args.temperature, args.top_k, args.top_p)


def _prompts(given: list[str], file: str | None) -> list[str]:
  """The prompts of --prompt, then those of the --prompts file."""
  texts = list(given)
  if file:
    try:
      with open(os.path.expanduser(file), encoding='utf-8') as f:
        texts += [line.rstrip('\r\n') for line in f if line.strip()]
    except FileNotFoundError:
      raise UserError(f'there is no prompts file {file}.') from None
    except UnicodeDecodeError as e:
      raise UserError(f'{file} is not UTF-8 text ({e.reason} at byte '
                      f'{e.start:,}); give a UTF-8 file of prompts.') from None
    except OSError as e:
      raise UserError(f'cannot read {file} ({e.strerror or e}).') from None
  if not texts:
    raise UserError('no prompt: give --prompt=TEXT or --prompts=FILE with a '
                    'prompt on each line.')
  return texts


def encode(tokenizer, texts: list[str], bos: bool) -> list[list[int]]:
  """Each text's token ids, the BOS token first with `bos`."""
  if bos and tokenizer.bos_id is None:
    raise UserError(f'tokenizer {tokenizer.path} has no BOS token; leave '
                    '--bos out.')
  prompts = [([tokenizer.bos_id] if bos else []) + ids
             for ids in tokenizer.encode_batch(texts)]
  for i, ids in enumerate(prompts):
    if not ids:
      raise UserError(f'prompt {i + 1} is empty: nothing to continue; give '
                      'it text, or --bos to start from the BOS token.')
  return prompts


def _check_positions(prompts, max_new_tokens: int, positions: int):
  longest = max(range(len(prompts)), key=lambda i: len(prompts[i]))
  width = len(prompts[longest])
  if width >= positions:
    raise UserError(f'prompt {longest + 1} has {width:,} tokens, more than '
                    f'the model leaves room for: it has {positions:,} '
                    'positions for the prompt and its continuation; shorten '
                    'it.')
  if width + max_new_tokens > positions:
    raise UserError(f'--max_new_tokens={max_new_tokens:,} after the longest '
                    f'prompt ({width:,} tokens) needs more than the model\'s '
                    f'{positions:,} positions; ask for at most '
                    f'{positions - width:,}.')


def load(weights: str, name: str | None, dtype=jnp.float32):
  """(the Decoder, its variables, the folder or file of its tokenizer or
  None) of --weights: a transformers folder, file or Hub repository, or a
  zoo checkpoint."""
  path = os.path.expanduser(weights)
  if os.path.isdir(path):
    file = transformers_files.weights_in(path)
    if file:
      return (*_transformers(file, name, dtype), path)
    if os.path.isfile(os.path.join(path, 'model.safetensors.index.json')):
      raise UserError(f'the folder {path} holds a transformers model in '
                      'several files (model.safetensors.index.json), which '
                      'is not read yet; give a model saved in one '
                      'model.safetensors.')
    if not any(os.path.isfile(os.path.join(path, *up, record))
               for up in ((), ('..',), ('..', '..'))
               for record in ('config.json', MODEL_FILE)):
      raise UserError(f'the folder {path} holds none of '
                      f'{", ".join(transformers_files.WEIGHTS)}'
                      " (a transformers model), nor is it a zoo checkpoint "
                      '(a workdir, one of its checkpoints, or a directory '
                      'python -m recipes.convert wrote).')
    return (*_checkpoint(path, name, dtype), None)
  if os.path.isfile(path):
    return (*_transformers(path, name, dtype),
            os.path.dirname(os.path.abspath(path)))
  if (not transformers_files.names_a_repository(weights) or
      os.path.exists(os.path.dirname(path))):
    raise UserError(f'there is no {weights}; give a transformers folder or '
                    'file, a Hub repository (HuggingFaceTB/SmolLM2-135M), '
                    "or a zoo decoder's workdir or checkpoint.")
  file, tokenizer = transformers_files.fetch(weights, ['tokenizer.json'])
  return (*_transformers(file, name, dtype), tokenizer)


def _transformers(file: str, name: str | None, dtype):
  tensors = convert.files.read(file)
  if not transformers_decoder.matches(tensors):
    raise UserError(f'{file} holds no transformers language model of the '
                    "zoo's (GPT2LMHeadModel, LlamaForCausalLM, "
                    "Qwen2ForCausalLM weights); give one's model.safetensors.")
  if name:
    _check_decoder(name, file)
  converted = transformers_decoder.convert(
      tensors, file, name, config=transformers_decoder.read_config(file))
  return _model(converted.name, converted.kwargs, dtype), converted.variables


def _checkpoint(path: str, name: str | None, dtype):
  """A zoo decoder and its parameters from a run's or a conversion's
  checkpoint at `path`."""
  saved, kwargs = export.model_of(path, num_classes=False)
  if name and name != saved:
    raise UserError(f'{path} holds a {saved}, not a {name}; leave --model '
                    'out.')
  _check_decoder(saved, path)
  device = jax.sharding.SingleDeviceSharding(jax.devices('cpu')[0])
  shapes = {k: v for k, v in target_shapes(saved, kwargs).items()
            if k.startswith('params/')}
  target = {k: jax.ShapeDtypeStruct(v, jnp.float32, sharding=device)
            for k, v in shapes.items()}
  loaded, missing = resume.load_params(
      path, traverse_util.unflatten_dict(target, sep='/'))
  if missing:
    raise UserError(f'the checkpoint at {path} has no {missing[0]} of shape '
                    f'{shapes[missing[0]]} (and {len(missing) - 1} more '
                    f'missing) that {saved} needs: another model?')
  return (_model(saved, kwargs, dtype),
          traverse_util.unflatten_dict(loaded, sep='/'))


def _check_decoder(name: str, where: str):
  try:
    spec = registry.spec(name)
  except ValueError as e:
    raise UserError(str(e)) from None
  if spec.cls is not Decoder:
    decoders = [n for n in registry.list_models()
                if registry.spec(n).cls is Decoder]
    raise UserError(f'{name} ({where}) is not a decoder language model; '
                    'python -m recipes.generate continues text with one of '
                    f'{", ".join(decoders)}.')


def _model(name: str, kwargs: dict, dtype) -> Decoder:
  return registry.create(name, **{**kwargs, 'dtype': dtype,
                                  'logits_dtype': jnp.float32})


def _tokenizer_path(given: str | None, found: str | None,
                    weights: str) -> str:
  if given:
    return given
  if found is None:
    raise UserError(f'{weights} is a checkpoint, which holds no tokenizer; '
                    "give the model's with --tokenizer=FILE_OR_FOLDER.")
  return found


def _generate(model, variables, prompts, tokenizer, sampling, args):
  """The continuations' texts, a batch at a time, with a line per batch on
  stderr."""
  width = max(map(len, prompts))
  rows = min(args.batch_size, len(prompts))
  variables = jax.device_put(variables)  # Once, not at every batch.
  rng = jax.random.key(args.seed)
  texts, total, began = [], 0, time.monotonic()
  for first in range(0, len(prompts), rows):
    batch = prompts[first:first + rows]
    # One shape for every batch: the last is filled up with the first row.
    padded = batch + [batch[0]] * (rows - len(batch))
    tokens = np.zeros((rows, width), np.int32)
    for i, ids in enumerate(padded):
      tokens[i, :len(ids)] = ids
    start = time.monotonic()
    new, counts = generation.generate(
        model, variables, tokens, np.array([len(p) for p in padded]),
        max_new_tokens=args.max_new_tokens, sampling=sampling,
        eos_id=tokenizer.eos_id, rng=jax.random.fold_in(rng, first))
    new, counts = np.asarray(new), np.asarray(counts)
    seconds = time.monotonic() - start
    made = int(counts[:len(batch)].sum())
    total += made
    for row, count in zip(new[:len(batch)], counts[:len(batch)]):
      ids = row[:count]
      if tokenizer.eos_id is not None and count and ids[-1] == tokenizer.eos_id:
        ids = ids[:-1]
      texts.append(tokenizer.decode(ids))
    note = ' (compiling included)' if first == 0 else ''
    print(f'prompts {first + len(batch):,}/{len(prompts):,}: {made:,} tokens '
          f'in {seconds:.2f} s, {made / seconds:,.1f} tokens/s{note}',
          file=sys.stderr)
  seconds = time.monotonic() - began
  print(f'generated {total:,} tokens for {len(prompts):,} '
        f'prompt{"s" if len(prompts) > 1 else ""} in '
        f'{seconds:.2f} s, {total / seconds:,.1f} tokens/s', file=sys.stderr)
  return texts


if __name__ == '__main__':
  startup.loaded()
  sys.exit(main(sys.argv[1:]))
