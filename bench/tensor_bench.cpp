namespace actorch::bench {}
