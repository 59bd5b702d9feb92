"""The image work: decoding encoded images, preprocessing and augmentation
(RandAugment), in TensorFlow ops shared by every pipeline."""
