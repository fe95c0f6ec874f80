"""`trainstack validate` shows what an alias resolved to, and refuses an image the region lacks."""

from __future__ import annotations

from trainstack_cli.main import main


def test_validate_shows_the_version_an_alias_resolves_to(tmp_path, capsys):
    spec = tmp_path / "job.yaml"
    spec.write_text('name: alias\ninstance_type: ml.p4d.24xlarge\nframework_version: "2.2"\n')
    assert main(["validate", str(spec)]) == 0
    assert f'{spec}: PyTorch 2.2.0 (the SDK\'s alias "2.2"), py310, image pytorch-training' in capsys.readouterr().out


def test_validate_with_a_region_refuses_smp_where_its_image_does_not_exist(tmp_path, capsys):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: smp\ninstance_type: ml.p4d.24xlarge\ninstance_count: 2\nstrategy: smp\n")
    assert main(["validate", str(spec), "--region", "af-south-1"]) == 1
    assert "no smdistributed-modelparallel image for PyTorch 2.5.1 in af-south-1" in capsys.readouterr().err
