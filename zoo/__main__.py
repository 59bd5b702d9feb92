"""Prints every registered model's parameter count, forward GFLOPs and input shape.

    python -m zoo
"""

import zoo


def main():
  print(f'{"model":<10} {"params":>13} {"GFLOPs":>8}  input')
  for name in zoo.list_models():
    info = zoo.model_info(name)
    shape = 'x'.join(map(str, info.input_shape))
    print(f'{name:<10} {info.num_params:>13,} {info.gflops:>8.3f}  {shape}')


if __name__ == '__main__':
  main()
