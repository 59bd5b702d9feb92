"""The base of the recipes' own metric writers (TensorBoard event files, W&B):
scalars and hyperparameters are all a run writes."""

from clu import metric_writers


class ScalarWriter(metric_writers.MetricWriter):
  """A CLU MetricWriter whose subclasses write scalars and hyperparameters
  (`write_scalars`, `write_hparams`, `flush`, `close`); the other kinds of
  summary are refused."""

  def _unsupported(self, *args, **kwargs):
    del args, kwargs
    raise NotImplementedError(
        f'{type(self).__name__} writes scalars and hyperparameters only.')

  write_summaries = write_images = write_videos = write_audios = _unsupported
  write_texts = write_histograms = _unsupported
