"""Partition rules: which mesh axes split each parameter, from the config.

The mesh has the axes ('data', 'fsdp', 'tensor'). Two kinds of rules decide
where a parameter goes; for each parameter the first rule that matches wins,
and a parameter that no rule matches is replicated:

1. `config.path_rules`: (regex, spec) pairs, the regex searched in the
   parameter's path such as 'block0/Dense_0/kernel', the spec one entry per
   dimension (None, a mesh axis, or a tuple of mesh axes). For models without
   logical-axis annotations, or to override a few parameters. Checked first.
2. `config.partition_rules`: Flax logical-axis rules, (logical name, mesh axes)
   pairs in order, applied to the names a zoo model gives each parameter
   dimension (see zoo/partitioning.py). Empty means the defaults for the
   model's family, `default_rules(config.model)`. As in Flax, a dimension
   takes the first rule for its name whose mesh axes the array does not use
   yet.

The same logical rules place activations through the models'
`nn.with_logical_constraint` calls. The batch is always split over
('data', 'fsdp'); a 'batch' rule saying so is added when the rules lack one.

A rule from the config that matches no parameter (a misspelt name or path,
or a rule for another model) gets a warning naming it; the default rules
serve a whole family (an MLP has no convolution kernels) and get none.
"""

import math
import re
from typing import Any, Iterable, Sequence

import flax.linen as nn
import jax
import numpy as np
from absl import logging
from jax.sharding import NamedSharding, PartitionSpec

import zoo
from recipes.runtime.errors import UserError
from zoo.partitioning import IMAGE, TOKENS

MESH_AXES = ('data', 'fsdp', 'tensor')
BATCH_AXES = ('data', 'fsdp')

# (logical name, None | mesh axis | tuple of mesh axes), Flax's form.
LogicalRules = tuple[tuple[str, Any], ...]
# (regex on the parameter path, one entry per dimension).
PathRules = tuple[tuple[str, tuple[Any, ...]], ...]


class DefaultRules(tuple):
  """Logical rules that come with a model family, not from the user: unlike
  the user's, they are not warned of when they match no parameter."""


# 'batch' comes first, so in an activation (batch, seq, embed) 'batch' takes
# ('data', 'fsdp') and 'embed' finds 'fsdp' taken and stays replicated, while
# in a parameter (embed, mlp) the same rule shards 'embed' over 'fsdp':
# parameters are fully sharded (FSDP), activations are split by batch only.

# Conv nets and MLPs: data parallel with fully sharded parameters. The
# sharded dimension is the output channels (multiples of 16 in the zoo).
CONV_RULES = DefaultRules((
    ('batch', BATCH_AXES),
    ('conv_out', 'fsdp'),
    ('embed', 'fsdp'),
    ('conv_in', None),
    ('mlp', None),
    ('classes', None),
    ('norm', None),
    ('height', None),
    ('width', None),
    ('channels', None),
))

# Transformers: FSDP over the embedding, plus Megatron-style tensor
# parallelism: MLP hidden features and attention heads split over 'tensor'
# (so the number of heads must be divisible by the 'tensor' axis size).
TRANSFORMER_RULES = DefaultRules((
    ('batch', BATCH_AXES),
    ('embed', 'fsdp'),
    ('mlp', 'tensor'),
    ('heads', 'tensor'),
    ('kv', None),
    ('seq', None),
    ('conv_in', None),
    ('classes', None),
    ('norm', None),
))

# Language models: the transformers' rules, the key and value heads of
# grouped-query attention split over 'tensor' like the query heads; the
# vocabulary is not split (GPT-2's 50,257 divides by nothing).
DECODER_RULES = DefaultRules((
    *TRANSFORMER_RULES,
    ('kv_heads', 'tensor'),
    ('vocab', None),
))

# By `zoo.spec(name).family`; text encoders (BERT) name their axes as the
# decoders do.
FAMILY_RULES = {'mlp': CONV_RULES, 'convnet': CONV_RULES,
                'transformer': TRANSFORMER_RULES, 'decoder': DECODER_RULES,
                'encoder': DECODER_RULES}


def default_rules(model: str) -> DefaultRules:
  """The logical rules for the family of zoo model `model`; none for a model
  of your own (its parameters are replicated, its batch split).

  Args:
    model: a zoo model name.

  Returns:
    The family's rules, as DefaultRules.
  """
  return FAMILY_RULES.get(zoo.spec(model).family, DefaultRules())


def path_str(key_path) -> str:
  """'block0/Dense_0/kernel' for a pytree key path.

  Args:
    key_path: a key path from jax.tree_util's *_with_path functions.

  Returns:
    The keys joined by '/'.
  """
  parts = []
  for key in key_path:
    for attr in ('key', 'name', 'idx'):
      if hasattr(key, attr):
        parts.append(str(getattr(key, attr)))
        break
    else:
      parts.append(str(key))
  return '/'.join(parts)


def _axes(entry) -> tuple[str, ...]:
  """The mesh axes of one spec entry: None, 'axis' or ('axis', ...)."""
  if entry is None:
    return ()
  return (entry,) if isinstance(entry, str) else tuple(entry)


def _check_axes(entry, where: str):
  for axis in _axes(entry):
    if axis not in MESH_AXES:
      raise UserError(f'{where} names mesh axis {axis!r}; the mesh axes are '
                      f'{", ".join(MESH_AXES)}.')


def logical_rules(rules: Iterable, defaults: Iterable = ()) -> LogicalRules:
  """The user's `rules` checked (or `defaults` when empty), with a 'batch'
  rule. The result is `DefaultRules` unless it holds the user's rules.

  Args:
    rules: (logical name, mesh axes) pairs (config.partition_rules); the
      mesh axes None, an axis or a tuple of axes.
    defaults: the rules to use when `rules` is empty, e.g.
      `default_rules(model)`.

  Returns:
    The rules as tuples, with ('batch', BATCH_AXES) first if none was given.

  Raises:
    UserError: for a rule that is not a pair, or names no mesh axis.
  """
  given = tuple(rules)
  user_given = bool(given) and not isinstance(rules, DefaultRules)
  checked = []
  for rule in given or tuple(defaults):
    if (not isinstance(rule, (tuple, list)) or len(rule) != 2
        or not isinstance(rule[0], str)):
      raise UserError(f'partition rule {rule!r} is not a (logical name, mesh '
                      "axes) pair, e.g. ('mlp', 'tensor').")
    _check_axes(rule[1], f'partition rule {tuple(rule)!r}')
    mesh_axes = rule[1] if rule[1] is None or isinstance(rule[1], str) else (
        tuple(rule[1]))
    checked.append((rule[0], mesh_axes))
  if not any(name == 'batch' for name, _ in checked):
    checked.insert(0, ('batch', BATCH_AXES))
  return tuple(checked) if user_given else DefaultRules(checked)


def path_rules(rules: Iterable) -> PathRules:
  """The config's regex rules, checked, each spec a tuple.

  Args:
    rules: (regex, spec) pairs (config.path_rules); each spec entry None,
      a mesh axis or a tuple of mesh axes.

  Returns:
    The rules as tuples.

  Raises:
    UserError: for a rule that is not a pair, a bad regex, or an unknown
      mesh axis.
  """
  checked = []
  for rule in rules:
    if (not isinstance(rule, (tuple, list)) or len(rule) != 2
        or not isinstance(rule[0], str)
        or not isinstance(rule[1], (tuple, list))):
      raise UserError(f'path rule {rule!r} is not a (regex, spec) pair, e.g. '
                      "('mlp/kernel$', (None, 'tensor')).")
    try:
      re.compile(rule[0])
    except re.error as e:
      raise UserError(f'path rule regex {rule[0]!r} is invalid: {e}.') from None
    for entry in rule[1]:
      _check_axes(entry, f'path rule {tuple(rule)!r}')
    checked.append((rule[0], tuple(rule[1])))
  return tuple(checked)


def _trimmed(entries) -> PartitionSpec:
  # Trailing Nones say nothing: P('fsdp', None) is P('fsdp'), and a
  # replicated parameter reads P() in the table and in tests.
  entries = list(entries)
  while entries and entries[-1] is None:
    entries.pop()
  return PartitionSpec(*entries)


def _spec_for(path: str, shape: Sequence[int], names, rules: LogicalRules,
              regexes: PathRules) -> PartitionSpec:
  for regex, spec in regexes:
    if re.search(regex, path):
      if len(spec) > len(shape):
        raise UserError(f'path rule ({regex!r}, {spec!r}) has {len(spec)} '
                        f'entries but parameter {path} has shape '
                        f'{tuple(shape)}; give at most one per dimension.')
      return _trimmed(spec)
  if not names or not any(isinstance(n, str) for n in names):
    return PartitionSpec()  # No annotations: replicated.
  return _trimmed(nn.logical_to_mesh_axes(tuple(names), rules))


def check_shardable(path: str, shape: Sequence[int], spec: PartitionSpec,
                    mesh_shape: dict[str, int]):
  """A clear error when a mesh axis size does not divide a dimension.

  Args:
    path: the parameter's path, for the message.
    shape: the parameter's shape.
    spec: the mesh axes of each dimension.
    mesh_shape: the size of each mesh axis.

  Raises:
    UserError: if a dimension's size is not a multiple of its axes' sizes.
  """
  for dim, entry in enumerate(spec):
    axes = _axes(entry)
    size = math.prod(mesh_shape[a] for a in axes)
    if axes and shape[dim] % size:
      axis = axes[0] if len(axes) == 1 else axes
      raise UserError(
          f'cannot shard parameter {path}: dimension {dim} of its shape '
          f'{tuple(shape)} has size {shape[dim]}, which mesh axis {axis!r} of '
          f'size {size} does not divide; change --config.mesh so that it '
          'does, or map this dimension to another axis or None in '
          'config.partition_rules / config.path_rules.')


def param_specs(params, names, rules: LogicalRules, regexes: PathRules,
                mesh_shape: dict[str, int]):
  """A PartitionSpec for each parameter, checked against the mesh sizes.

  `params` holds arrays or shape structs; `names` the same tree with a
  PartitionSpec of logical names per parameter (`nn.get_partition_spec`).

  Args:
    params: the parameters, as above.
    names: their logical names, as above.
    rules: the logical rules (`logical_rules`); warnings for unmatched
      ones unless they are DefaultRules.
    regexes: the path rules (`path_rules`), checked first.
    mesh_shape: the size of each mesh axis.

  Returns:
    The params tree with a PartitionSpec of mesh axes per parameter.

  Raises:
    UserError: for a path rule longer than its parameter's rank, or a
      dimension its mesh axes do not divide.
  """
  flat, treedef = jax.tree_util.tree_flatten_with_path(params)
  name_leaves = treedef.flatten_up_to(names)
  paths = [path_str(key_path) for key_path, _ in flat]
  _warn_unmatched(paths, name_leaves, rules, regexes,
                  user_given=not isinstance(rules, DefaultRules))
  specs = []
  for path, (_, leaf), leaf_names in zip(paths, flat, name_leaves):
    spec = _spec_for(path, leaf.shape, leaf_names, rules, regexes)
    check_shardable(path, leaf.shape, spec, mesh_shape)
    specs.append(spec)
  return jax.tree.unflatten(treedef, specs)


def _warn_unmatched(paths: Sequence[str], names, rules: LogicalRules,
                    regexes: PathRules, user_given: bool):
  """Warns of each path rule, and each of the user's logical rules, that
  matches no parameter."""
  for regex, spec in regexes:
    if not any(re.search(regex, path) for path in paths):
      logging.warning(
          'config.path_rules entry %r matches no parameter path (they look '
          'like %s).', (regex, spec), ', '.join(repr(p) for p in paths[:4]))
  if not user_given:
    return
  used = {name for spec in names for entry in spec for name in _axes(entry)}
  # The zoo's activation names ('height', 'seq', ...) name no parameter.
  known = used | {'batch', *IMAGE, *TOKENS}
  for rule in rules:
    if rule[0] not in known:
      logging.warning(
          'config.partition_rules entry %r matches no parameter: none has a '
          'dimension named %r (%s); it can only place activations.', rule,
          rule[0], f'their names: {", ".join(sorted(used))}' if used else
          'they have no logical names: use config.path_rules')


def bytes_per_device(tree, shardings) -> int:
  """Bytes each device holds of the arrays in `tree` under `shardings`.

  Args:
    tree: arrays or shape structs.
    shardings: a sharding per leaf of `tree`, in the same order.

  Returns:
    The bytes of one device's shards, summed over the leaves.
  """
  return sum(
      math.prod(s.shard_shape(a.shape)) * np.dtype(a.dtype).itemsize
      for a, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)))


def table(params, shardings: Any) -> str:
  """One row per parameter: path, shape, PartitionSpec, bytes per device.

  Args:
    params: the parameters, arrays or shape structs.
    shardings: a NamedSharding per parameter, the same tree.

  Returns:
    A Markdown table, with a row of totals.
  """
  rows = [('path', 'shape', 'PartitionSpec', 'bytes/device')]
  flat = jax.tree_util.tree_leaves_with_path(params)
  for (key_path, leaf), sharding in zip(flat, jax.tree.leaves(shardings)):
    assert isinstance(sharding, NamedSharding)
    rows.append((path_str(key_path), str(tuple(leaf.shape)),
                 str(sharding.spec), f'{bytes_per_device(leaf, sharding):,}'))
  total = bytes_per_device(params, shardings)
  whole = sum(a.size * np.dtype(a.dtype).itemsize
              for a in jax.tree.leaves(params))
  rows.append(('total', f'{sum(a.size for a in jax.tree.leaves(params)):,} '
               'values', f'{whole:,} bytes whole', f'{total:,}'))
  widths = [max(len(r[i]) for r in rows) for i in range(4)]
  lines = ['| ' + ' | '.join(c.ljust(w) for c, w in zip(r, widths)) + ' |'
           for r in rows]
  lines.insert(1, '|' + '|'.join('-' * (w + 2) for w in widths) + '|')
  return '\n'.join(lines)
