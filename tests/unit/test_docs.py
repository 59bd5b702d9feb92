"""The README stays a short front door, and every relative link in it and
in docs/ leads to a file (and a heading) that exists."""

import pathlib
import re

from tests.helpers import ROOT

README = pathlib.Path(ROOT, 'README.md')
DOCS = [README, *sorted(pathlib.Path(ROOT, 'docs').rglob('*.md'))]
README_MAX_LINES = 250


def test_the_readme_is_at_most_250_lines():
  lines = len(README.read_text(encoding='utf-8').splitlines())
  assert lines <= README_MAX_LINES, (
      f'README.md has {lines} lines; move detail into docs/.')


def _prose(path: pathlib.Path) -> str:
  """`path`'s text without its code blocks."""
  return re.sub(r'```.*?```', '', path.read_text(encoding='utf-8'),
                flags=re.DOTALL)


def _anchors(path: pathlib.Path) -> set[str]:
  """The anchors GitHub gives the headings of `path`: lower case, spaces to
  hyphens, punctuation dropped; a repeated one gets -1, -2, ..."""
  anchors, seen = set(), {}
  for heading in re.findall(r'^#+ +(.*?) *#* *$', _prose(path),
                            re.MULTILINE):
    slug = re.sub(r'[^\w\- ]', '', heading.lower()).replace(' ', '-')
    count = seen.get(slug, 0)
    seen[slug] = count + 1
    anchors.add(f'{slug}-{count}' if count else slug)
  return anchors


def _links(path: pathlib.Path) -> list[str]:
  """The relative link targets of `path`'s Markdown links, code left out."""
  text = re.sub(r'`[^`\n]*`', '', _prose(path))
  targets = re.findall(r'\]\(([^)\s]+)\)', text)
  return [t for t in targets if not re.match(r'[a-z]+:', t)]


def test_every_relative_link_leads_somewhere():
  broken = []
  for path in DOCS:
    for target in _links(path):
      file, _, anchor = target.partition('#')
      linked = (path.parent / file).resolve() if file else path
      if not linked.exists():
        broken.append(f'{path.relative_to(ROOT)}: {target} (no such file)')
      elif anchor and linked.suffix == '.md' and anchor not in _anchors(
          linked):
        broken.append(f'{path.relative_to(ROOT)}: {target} (no such heading)')
  assert not broken, '\n'.join(broken)


def _weights_claims():
  """(models, tags) of each claim in the README model table's weights
  column: "`a`, `b`: `tag`", "`a` also `tag`", "`a`: none" (tags empty), and
  a whole cell "none ..." for the models the row names."""
  import zoo  # pylint: disable=import-outside-toplevel
  names = set(zoo.list_models())
  claims = []
  table = re.search(r'^\| family \|.*?\n\n', README.read_text(
      encoding='utf-8'), re.MULTILINE | re.DOTALL).group(0)
  for row in table.strip().splitlines()[2:]:
    cells = [c.strip() for c in row.strip('| ').split(' | ')]
    row_models = [m for m in re.findall(r'`(\w+)`', cells[1]) if m in names]
    if cells[3].startswith('none'):
      claims.append((row_models, []))
      continue
    for part in cells[3].split(';'):
      head, sep, tail = part.partition(' also ')
      if not sep:
        head, sep, tail = part.partition(':')
      models = [m for m in re.findall(r'`(\w+)`', head) if m in names]
      tags = [t for t in re.findall(r'`(\w+)`', tail) if t not in names]
      if models:
        claims.append((models, [] if tail.strip().startswith('none')
                       else tags[:1]))
  return claims


def test_the_readme_says_which_models_have_which_weights():
  from zoo import weights  # pylint: disable=import-outside-toplevel
  claims = _weights_claims()
  assert (['bit_r152x4'], []) in claims  # "`bit_r152x4`: none"
  assert len(claims) >= 8
  for models, tags in claims:
    for model in models:
      if tags:
        assert tags[0] in weights.tags(model), (model, tags[0])
      else:
        assert not weights.tags(model), (model, list(weights.tags(model)))
