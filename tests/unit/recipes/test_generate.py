"""python -m recipes.generate in process: a transformers folder (written
here through the zoo's own export to transformers' names), a run's
workdir and a converted directory give the same greedy continuations,
those of full forward passes;
sampling repeats with its seed; every mistake is one line and status 1.
(The command as a process: tests/integration/test_generate_command.py.)"""

import json
import shutil

import flax.linen as nn
import jax
import numpy as np
import pytest
import safetensors.numpy

import zoo
from recipes import generate
from recipes.checkpoint import converted, store
from zoo import convert as zoo_convert
from zoo.convert import export, transformers_decoder

tokenizers = pytest.importorskip('tokenizers')
pytestmark = pytest.mark.usefixtures('fast_compiles')

# A tiny GPT-2 with heads of 64 features, as the registered gpt2's (without
# a config.json the converter counts the heads in the named model's width).
KWARGS = dict(vocab_size=101, hidden_size=128, num_layers=2, num_heads=2,
              mlp_dim=256, max_length=24)
EOS = 100  # '<|endoftext|>'


def write_model_folder(folder):
  """A transformers GPT-2 folder: model.safetensors and a word-level
  tokenizer.json (w0 ... w99, then EOS); returns the zoo variables."""
  folder.mkdir(parents=True, exist_ok=True)
  model = zoo.create('gpt2', **KWARGS)
  variables = nn.meta.unbox(jax.jit(model.init)(
      jax.random.PRNGKey(0), np.zeros((1, 4), np.int32)))
  variables = jax.tree.map(np.asarray, variables)
  safetensors.numpy.save_file(
      export.state_dict(transformers_decoder, 'gpt2', KWARGS, variables),
      str(folder / 'model.safetensors'), metadata={'format': 'pt'})
  vocab = {f'w{i}': i for i in range(100)}
  vocab['<|endoftext|>'] = EOS
  tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(
      vocab, unk_token='w0'))
  tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
  tokenizer.decoder = tokenizers.decoders.WordPiece(prefix='##')
  tokenizer.save(str(folder / 'tokenizer.json'))
  return variables


@pytest.fixture(scope='module')
def model_folder(tmp_path_factory):
  folder = tmp_path_factory.mktemp('generate') / 'gpt2'
  return folder, write_model_folder(folder)


def _greedy(variables, ids, new):
  """Greedy continuation by full forward passes and argmax (over rows
  right-padded to the model's length: one program)."""
  apply = jax.jit(zoo.create('gpt2', **KWARGS).apply)
  row = np.zeros((1, KWARGS['max_length']), np.int32)
  row[0, :len(ids)] = ids
  for t in range(len(ids), len(ids) + new):
    row[0, t] = np.argmax(apply(variables, row)[0, t - 1])
    if row[0, t] == EOS:
      break
  return list(row[0, len(ids):t + 1])


def _run(capsys, *argv):
  status = generate.main([str(a) for a in argv])
  out, err = capsys.readouterr()
  return status, out, err


def test_a_folder_and_a_workdir_continue_prompts_greedily(model_folder,
                                                          tmp_path, capsys):
  folder, variables = model_folder
  prompts = tmp_path / 'prompts.txt'
  prompts.write_text('w5 w6 w7\n\nw9\n')
  argv = ['--model=gpt2', '--prompt=w1 w2 w3 w4 w5', f'--prompts={prompts}',
          '--max_new_tokens=6', '--batch_size=2']
  status, out, err = _run(capsys, f'--weights={folder}', *argv)
  assert status == 0, err
  expected = []
  for i, ids in enumerate(([1, 2, 3, 4, 5], [5, 6, 7], [9])):
    new = [t for t in _greedy(variables, ids, 6) if t != EOS]
    expected += [f'==> prompt {i + 1} <==', ' '.join(f'w{t}' for t in new)]
  assert out.splitlines() == expected
  lines = err.splitlines()
  assert lines[0].startswith('prompts 2/3: ') and 'tokens/s' in lines[0]
  assert lines[1].startswith('prompts 3/3: ')
  assert lines[2].startswith('generated ') and len(lines) == 3
  # The same weights as a run's checkpoint: its workdir and config.json.
  workdir = tmp_path / 'work'
  with store.opened(workdir) as mngr:
    store.save(mngr, 3, {'params': variables['params']})
  (workdir / 'config.json').write_text(json.dumps(
      {'model': 'gpt2', 'model_kwargs': KWARGS}))
  status, again, err = _run(capsys, f'--weights={workdir}',
                            f'--tokenizer={folder}', *argv[1:])
  assert status == 0, err
  assert again == out
  # And as python -m recipes.convert writes them (model.json).
  file = str(folder / 'model.safetensors')
  converted_dir = tmp_path / 'converted'
  converted.save(zoo_convert.load(file, 'transformers', 'gpt2'),
                 converted_dir, file)
  status, again, err = _run(capsys, f'--weights={converted_dir}',
                            f'--tokenizer={folder}', *argv)
  assert status == 0, err
  assert again == out


def test_the_config_json_beside_the_weights_gives_the_heads(model_folder,
                                                            tmp_path):
  folder = tmp_path / 'gpt2'
  shutil.copytree(model_folder[0], folder)
  (folder / 'config.json').write_text(json.dumps(
      {'model_type': 'gpt2', 'n_embd': 128, 'n_head': 4}))
  model, _, tokenizer = generate.load(str(folder), 'gpt2')
  assert (model.num_heads, model.head_dim) == (4, None)  # 128 / 4 each.
  assert tokenizer == str(folder)
  (folder / 'config.json').write_text('{"n_head": 3}')
  with pytest.raises(ValueError, match='does not fit its config.json'):
    generate.load(str(folder / 'model.safetensors'), 'gpt2')


@pytest.mark.slow
def test_sampling_repeats_with_its_seed(model_folder, capsys):
  folder, _ = model_folder
  argv = [f'--weights={folder}', '--model=gpt2', '--prompt=w1 w2',
          '--prompt=w3', '--temperature=2', '--top_k=20', '--top_p=0.9',
          '--max_new_tokens=8']
  outs = [_run(capsys, *argv, f'--seed={seed}') for seed in (1, 1, 2)]
  assert [status for status, _, _ in outs] == [0, 0, 0]
  assert outs[0][1] == outs[1][1] != outs[2][1]


@pytest.mark.parametrize('case, says', [
    ('prompt too long', 'prompt 1 has 24 tokens, more than the model leaves'),
    ('new 0', '--max_new_tokens=0 must be 1 or more'),
    ('new negative', '--max_new_tokens=-3 must be 1 or more'),
    ('new huge', "--max_new_tokens=1,000,000 after the longest prompt (2 "
     "tokens) needs more than the model's 24 positions; ask for at most 22"),
    ('temperature negative', '--temperature=-0.5 must be a number, 0'),
    ('temperature nan', '--temperature=nan must be a number'),
    ('top_p 0', '--top_p=0.0 must be more than 0 and at most 1'),
    ('top_p above 1', '--top_p=1.5 must be more than 0 and at most 1'),
    ('top_k negative', '--top_k=-1 must be 0 (all tokens) or more'),
    ('vision model', 'resnet18 ('),
    ('vision workdir', 'cnn ('),
    ('not a language model', 'holds no transformers language model'),
    ('no tokenizer', 'holds none of tokenizer.json'),
    ('checkpoint without tokenizer', 'holds no tokenizer; give the model'),
    ('no prompt', 'no prompt: give --prompt=TEXT'),
    ('empty prompt', 'prompt 2 is empty'),
    ('no prompts file', 'there is no prompts file'),
    ('no weights', 'there is no'),
    ('empty folder', 'holds none of model.safetensors, pytorch_model.bin'),
])
def test_bad_input_is_one_line_and_status_1(model_folder, tmp_path, capsys,
                                            case, says):
  folder, variables = model_folder
  argv = [f'--weights={folder}', '--model=gpt2', '--prompt=w1 w2']
  if case == 'prompt too long':
    argv[-1] = '--prompt=' + ' '.join(['w3'] * 24)
  elif case.startswith('new '):
    argv.append('--max_new_tokens=' + {'0': '0', 'negative': '-3',
                                       'huge': '1000000'}[case[4:]])
  elif case.startswith('temperature'):
    argv.append('--temperature=' + ('-0.5' if 'negative' in case else 'nan'))
  elif case.startswith('top_p'):
    argv.append('--top_p=' + ('0' if case.endswith('0') else '1.5'))
  elif case == 'top_k negative':
    argv.append('--top_k=-1')
  elif case == 'vision model':
    argv[1] = '--model=resnet18'
  elif case == 'vision workdir':
    (tmp_path / 'config.json').write_text(json.dumps(
        {'model': 'cnn', 'model_kwargs': {}}))
    argv[:2] = [f'--weights={tmp_path}']
  elif case == 'not a language model':
    safetensors.numpy.save_file({'conv1.weight': np.zeros((2, 3), np.float32)},
                                str(tmp_path / 'model.safetensors'))
    argv[0] = f'--weights={tmp_path}'
  elif case == 'no tokenizer':
    (tmp_path / 'bare').mkdir()
    shutil.copy(folder / 'model.safetensors', tmp_path / 'bare')
    argv[0] = f'--weights={tmp_path / "bare"}'
  elif case == 'checkpoint without tokenizer':
    with store.opened(tmp_path / 'work') as mngr:
      store.save(mngr, 1, {'params': variables['params']})
    (tmp_path / 'work' / 'config.json').write_text(json.dumps(
        {'model': 'gpt2', 'model_kwargs': KWARGS}))
    argv[0] = f'--weights={tmp_path / "work"}'
  elif case == 'no prompt':
    argv.pop()
  elif case == 'empty prompt':
    argv.append('--prompt=')
  elif case == 'no prompts file':
    argv.append(f'--prompts={tmp_path / "missing.txt"}')
  elif case == 'no weights':
    argv[0] = f'--weights={tmp_path / "nothing"}'
  elif case == 'empty folder':
    argv[0] = f'--weights={tmp_path}'
  status, out, err = _run(capsys, *argv)
  assert status == 1
  assert not out
  assert err.startswith('error: ') and err.count('\n') == 1, err
  assert says in err, err
